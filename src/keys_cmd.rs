//! `superfluid keys create|list|revoke`: the API keys through the head's
//! admin API.

use anyhow::{Context, Result};
use serde_json::{json, Value};

use crate::admin_client::{client, text};
use crate::cli::KeysCommand;

pub async fn run(command: KeysCommand) -> Result<()> {
    match command {
        KeysCommand::Create {
            name,
            models,
            expires,
            rpm,
            tpm,
            admin,
        } => {
            let body = json!({
                "name": name,
                "models": (!models.is_empty()).then_some(models),
                "expires_in_secs": expires.map(|d| d.as_secs()),
                "rpm": rpm,
                "tpm": tpm,
            });
            let made = client(admin)?
                .call(reqwest::Method::POST, "/admin/v1/keys", Some(body))
                .await?;
            let secret = made["key"]
                .as_str()
                .context("the head's answer has no key")?;
            println!("{secret}");
            eprintln!(
                "created key {}: store it now, it is not shown again",
                text(&made["name"])
            );
        }
        KeysCommand::List { json, admin } => {
            let keys = client(admin)?
                .call(reqwest::Method::GET, "/admin/v1/keys", None)
                .await?;
            let keys = keys
                .as_array()
                .context("the head's key list is not an array")?;
            if json {
                println!("{}", serde_json::to_string_pretty(keys)?);
            } else {
                print_table(keys);
            }
        }
        KeysCommand::Revoke { name, admin } => {
            let revoked = client(admin)?
                .call(
                    reqwest::Method::POST,
                    &format!("/admin/v1/keys/{name}/revoke"),
                    None,
                )
                .await?;
            println!(
                "revoked key {}: it is refused from now on",
                text(&revoked["name"])
            );
        }
    }
    Ok(())
}

/// A Unix time as a UTC date and time; `-` if there is none.
fn when(v: &Value) -> String {
    let Some(secs) = v.as_u64() else {
        return "-".into();
    };
    let days = secs / 86400;
    let (h, m) = (secs % 86400 / 3600, secs % 3600 / 60);
    let (y, mo, d) = civil_from_days(days);
    format!("{y:04}-{mo:02}-{d:02} {h:02}:{m:02}")
}

/// The Gregorian date `days` after 1970-01-01 (Howard Hinnant's algorithm).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + u64::from(m <= 2);
    (y, m, d)
}

/// A per-minute limit; `-` for none.
fn limit(v: &Value) -> String {
    v.as_u64().map_or_else(|| "-".into(), |n| n.to_string())
}

fn print_table(keys: &[Value]) {
    println!(
        "{:<20} {:<16} {:<16} {:<16} {:<24} {:>8} {:>10} {:>8} {:>10} {:>10} {:>10}",
        "NAME",
        "CREATED",
        "EXPIRES",
        "LAST USED",
        "MODELS",
        "RPM",
        "TPM",
        "REQUESTS",
        "PROMPT",
        "CACHED",
        "COMPLETION"
    );
    for k in keys {
        let models = k["models"]
            .as_array()
            .map(|ms| ms.iter().map(text).collect::<Vec<_>>().join(","))
            .unwrap_or_else(|| "all".into());
        println!(
            "{:<20} {:<16} {:<16} {:<16} {:<24} {:>8} {:>10} {:>8} {:>10} {:>10} {:>10}",
            text(&k["name"]),
            when(&k["created"]),
            when(&k["expires"]),
            when(&k["last_used"]),
            models,
            limit(&k["rpm"]),
            limit(&k["tpm"]),
            text(&k["usage"]["requests"]),
            text(&k["usage"]["prompt_tokens"]),
            text(&k["usage"]["cached_tokens"]),
            text(&k["usage"]["completion_tokens"]),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::when;
    use serde_json::json;

    #[test]
    fn times_print_as_utc_dates() {
        assert_eq!(when(&json!(0)), "1970-01-01 00:00");
        assert_eq!(when(&json!(1_709_251_199)), "2024-02-29 23:59");
        assert_eq!(when(&json!(null)), "-");
    }
}
