//! Chat templates: the GGUF's `tokenizer.chat_template`, rendered the way
//! Hugging Face's `apply_chat_template` does (Jinja with `trim_blocks` and
//! `lstrip_blocks`, Python string methods, `raise_exception`).

use minijinja::syntax::SyntaxConfig;
use minijinja::{context, Environment, Error, ErrorKind, Value};
use std::time::{SystemTime, UNIX_EPOCH};

/// The name the template is stored under inside its environment.
const NAME: &str = "chat_template";

/// One message of a chat, as the template sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatMessage {
    /// `system`, `user`, `assistant`, `tool`.
    pub role: String,
    /// The message text.
    pub content: String,
}

impl ChatMessage {
    /// A message with this role and text.
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Self {
        Self {
            role: role.into(),
            content: content.into(),
        }
    }
}

/// A compiled chat template with the model's special token texts.
pub struct ChatTemplate {
    env: Environment<'static>,
    bos_token: String,
    eos_token: String,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate")
            .field("bos_token", &self.bos_token)
            .field("eos_token", &self.eos_token)
            .finish_non_exhaustive()
    }
}

impl ChatTemplate {
    /// Compiles `source`; the error says why the template does not parse.
    pub fn new(source: &str, bos_token: &str, eos_token: &str) -> Result<Self, String> {
        let mut env = Environment::new();
        let syntax = SyntaxConfig::builder()
            .trim_blocks(true)
            .lstrip_blocks(true)
            .build()
            .map_err(|e| e.to_string())?;
        env.set_syntax(syntax);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", raise_exception);
        env.add_function("strftime_now", strftime_now);
        env.add_template_owned(NAME, source.to_owned())
            .map_err(|e| describe(&e))?;
        Ok(Self {
            env,
            bos_token: bos_token.to_owned(),
            eos_token: eos_token.to_owned(),
        })
    }

    /// Renders the messages followed by the assistant's turn prefix
    /// (`add_generation_prompt = true`).
    pub fn render(&self, messages: &[ChatMessage]) -> Result<String, String> {
        let template = self.env.get_template(NAME).map_err(|e| describe(&e))?;
        template
            .render(context! {
                messages => messages
                    .iter()
                    .map(|m| Value::from_pairs([("role", m.role.as_str()), ("content", m.content.as_str())]))
                    .collect::<Vec<Value>>(),
                add_generation_prompt => true,
                bos_token => &self.bos_token,
                eos_token => &self.eos_token,
            })
            .map_err(|e| describe(&e))
    }
}

/// The template's error message with the line it came from, without the
/// multi-line debug dump.
fn describe(err: &Error) -> String {
    match (err.detail(), err.line()) {
        (Some(detail), Some(line)) if err.kind() == ErrorKind::InvalidOperation => {
            format!("{detail} (template line {line})")
        }
        _ => err.to_string(),
    }
}

/// `raise_exception(message)`: templates call it to reject a conversation.
fn raise_exception(message: String) -> Result<Value, Error> {
    Err(Error::new(ErrorKind::InvalidOperation, message))
}

/// `strftime_now(format)`: today's date (UTC) for templates that print it.
/// Supports `%d`, `%m`, `%Y`, `%b`, `%B`; other directives pass through.
fn strftime_now(format: String) -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let (year, month, day) = civil_from_days(secs / 86_400);
    const MONTHS: [&str; 12] = [
        "January",
        "February",
        "March",
        "April",
        "May",
        "June",
        "July",
        "August",
        "September",
        "October",
        "November",
        "December",
    ];
    let name = MONTHS
        .get(usize::try_from(month).unwrap_or(1).saturating_sub(1))
        .copied()
        .unwrap_or("January");
    format
        .replace("%d", &format!("{day:02}"))
        .replace("%m", &format!("{month:02}"))
        .replace("%Y", &year.to_string())
        .replace("%B", name)
        .replace("%b", name.get(..3).unwrap_or(name))
}

/// Year, month (1-12) and day (1-31) of a count of days since 1970-01-01.
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    // Howard Hinnant's algorithm, for non-negative day counts.
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod unit {
    use super::*;

    #[test]
    fn civil_dates_are_right() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(19_782), (2024, 2, 29));
    }

    #[test]
    fn python_string_methods_and_exceptions_work() {
        let t = ChatTemplate::new(
            "{% for m in messages %}{% if m.role == 'tool' %}{{ raise_exception('no tools') }}{% endif %}[{{ m.content.strip() }}]{% endfor %}",
            "<s>",
            "</s>",
        )
        .map_err(|e| e.to_string());
        let t = match t {
            Ok(t) => t,
            Err(e) => panic!("template should compile: {e}"),
        };
        let out = t.render(&[ChatMessage::new("user", "  hi  ")]);
        assert_eq!(out.as_deref(), Ok("[hi]"));
        let err = t.render(&[ChatMessage::new("tool", "x")]);
        assert!(matches!(&err, Err(e) if e.contains("no tools")), "{err:?}");
    }

    #[test]
    fn a_broken_template_is_an_error_not_a_panic() {
        assert!(ChatTemplate::new("{% for %}", "", "").is_err());
    }
}
