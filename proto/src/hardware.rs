//! The node's hardware description, as the hello carries it.
//!
//! A node describes its machine in one short line (CPU model and cores, RAM,
//! GPU backend). The head shows it in listings and as a Prometheus label, so
//! it keeps a bounded, printable version of whatever a node sends.

/// The most bytes of a hardware description the head keeps.
pub const MAX_HARDWARE_LEN: usize = 120;

/// `text` with control characters replaced by spaces, runs of whitespace
/// folded into one, and cut to at most [`MAX_HARDWARE_LEN`] bytes on a
/// character boundary.
pub fn bounded(text: &str) -> String {
    let mut out = String::with_capacity(text.len().min(MAX_HARDWARE_LEN));
    let mut space = false;
    for c in text.trim().chars() {
        let c = if c.is_control() { ' ' } else { c };
        if c.is_whitespace() {
            space = true;
            continue;
        }
        let extra = usize::from(space && !out.is_empty());
        if out.len() + extra + c.len_utf8() > MAX_HARDWARE_LEN {
            break;
        }
        if extra == 1 {
            out.push(' ');
        }
        space = false;
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_and_runs_of_spaces_fold_into_one_space() {
        assert_eq!(
            bounded("  Intel(R)\tXeon(R)\n\n 8 cores \u{7}16 GiB "),
            "Intel(R) Xeon(R) 8 cores 16 GiB"
        );
    }

    #[test]
    fn long_descriptions_are_cut_on_a_character_boundary() {
        let long = "é".repeat(100);
        let cut = bounded(&long);
        assert_eq!(cut.len(), MAX_HARDWARE_LEN);
        assert_eq!(cut, "é".repeat(MAX_HARDWARE_LEN / 2));
        assert_eq!(bounded(&"x".repeat(500)).len(), MAX_HARDWARE_LEN);
    }

    #[test]
    fn an_empty_description_stays_empty() {
        assert_eq!(bounded(" \n\t "), "");
    }
}
