//! Reading a Prometheus text page back: samples by name and labels.

/// One sample line.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: Vec<(String, String)>,
    pub value: f64,
}

/// Every sample on `page` (comments and blank lines skipped).
pub fn parse(page: &str) -> Vec<Sample> {
    page.lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(parse_line)
        .collect()
}

fn parse_line(line: &str) -> Option<Sample> {
    let name_end = line.find(['{', ' '])?;
    let name = line[..name_end].to_owned();
    let mut labels = Vec::new();
    let mut rest = &line[name_end..];
    if let Some(inner) = rest.strip_prefix('{') {
        let mut chars = inner.char_indices();
        let mut key = String::new();
        loop {
            let (i, c) = chars.next()?;
            match c {
                '}' => {
                    rest = &inner[i + 1..];
                    break;
                }
                ',' => {}
                '=' => {
                    chars.next()?; // the opening quote
                    let mut value = String::new();
                    loop {
                        match chars.next()?.1 {
                            '\\' => match chars.next()?.1 {
                                'n' => value.push('\n'),
                                other => value.push(other),
                            },
                            '"' => break,
                            other => value.push(other),
                        }
                    }
                    labels.push((std::mem::take(&mut key), value));
                }
                other => key.push(other),
            }
        }
    }
    let value = rest.split_whitespace().next()?.parse().ok()?;
    Some(Sample {
        name,
        labels,
        value,
    })
}

/// The sum of the samples named `name` that carry every label of `labels`.
pub fn sum(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> f64 {
    samples
        .iter()
        .filter(|s| s.name == name)
        .filter(|s| {
            labels
                .iter()
                .all(|(k, v)| s.labels.iter().any(|(sk, sv)| sk == k && sv == v))
        })
        .map(|s| s.value)
        .sum()
}

/// How much each of `series` moved from `before` to `after`.
pub fn delta(before: &[Sample], after: &[Sample], name: &str, labels: &[(&str, &str)]) -> f64 {
    sum(after, name, labels) - sum(before, name, labels)
}

#[test]
fn a_sample_line_is_read_with_escaped_labels() {
    let samples = parse("# HELP x y\nx_total{a=\"q\\\"uo,te\",b=\"\"} 3\nplain 1.5\n");
    assert_eq!(
        samples,
        [
            Sample {
                name: "x_total".into(),
                labels: vec![("a".into(), "q\"uo,te".into()), ("b".into(), String::new())],
                value: 3.0,
            },
            Sample {
                name: "plain".into(),
                labels: Vec::new(),
                value: 1.5,
            },
        ]
    );
    assert_eq!(sum(&samples, "x_total", &[("b", "")]), 3.0);
}
