//! Why the head refuses a node at the hello, with the message the node's
//! operator reads and a label for counting.

use superfluid_link::Fingerprint;

/// Every refusal label, in the order [`super::Membership::refusals`] lists them.
pub const REFUSAL_LABELS: [&str; 9] = [
    "bad_signature",
    "expired",
    "wrong_fleet",
    "nonce_used",
    "uses_exhausted",
    "unknown_node",
    "revoked",
    "duplicate",
    "storage",
];

/// Why a node may not join. Each message says what to do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The token is damaged, altered, or signed by another key.
    #[error("join token refused: {detail}; mint a new one with `superfluid fleet token` on this fleet's head and join with `superfluid fleet join TOKEN`")]
    BadSignature {
        /// What exactly was wrong with the token.
        detail: String,
    },
    /// The token's expiry has passed.
    #[error("join token refused: it expired at {expired_at} ({ago} s ago); mint a new one with `superfluid fleet token`")]
    Expired {
        /// When it expired, as UTC date and time.
        expired_at: String,
        /// Seconds since then.
        ago: u64,
    },
    /// The token names another fleet.
    #[error("join token refused: it is for fleet {token_fleet}, but this head runs fleet {fleet}; get a token from this head with `superfluid fleet token`, or join the head of {token_fleet}")]
    WrongFleet {
        /// The fleet the token names.
        token_fleet: String,
        /// This head's fleet.
        fleet: String,
    },
    /// A single-use token was used before.
    #[error("join token refused: it was already used (join tokens are single-use); mint a new one with `superfluid fleet token`")]
    NonceUsed,
    /// A multi-use token has no uses left.
    #[error("join token refused: all {uses} of its uses are spent; mint a new one with `superfluid fleet token` (with --uses N to admit several nodes)")]
    UsesExhausted {
        /// How many joins the token allowed.
        uses: u32,
    },
    /// The key is not enrolled and no token was presented.
    #[error("this node's key {fingerprint} is not enrolled in fleet {fleet}; join with `superfluid fleet join TOKEN`, using a token from `superfluid fleet token` on the head")]
    UnknownNode {
        /// The node's key.
        fingerprint: Fingerprint,
        /// This head's fleet.
        fleet: String,
    },
    /// The key was revoked.
    #[error("this node was revoked from fleet {fleet} (key {fingerprint}); to bring this machine back, delete its node.key and node.json and join again with a new token from `superfluid fleet token`")]
    Revoked {
        /// The node's key.
        fingerprint: Fingerprint,
        /// This head's fleet.
        fleet: String,
    },
    /// Another live connection already uses this key.
    #[error("a node with this key ({fingerprint}) is already connected as {node_id} ({name}); two machines share one identity (a copied data dir?); give this machine its own data dir and join it with `superfluid fleet join TOKEN`")]
    Duplicate {
        /// The key both present.
        fingerprint: Fingerprint,
        /// The connected node's id.
        node_id: String,
        /// The connected node's name.
        name: String,
    },
    /// The head could not record the enrolment.
    #[error("the head could not record this node's enrolment ({reason}); the head's operator should check its data dir; the node will retry")]
    Storage {
        /// What failed.
        reason: String,
    },
}

impl Refusal {
    /// The counted label of this refusal (one of [`REFUSAL_LABELS`]).
    pub fn label(&self) -> &'static str {
        match self {
            Refusal::BadSignature { .. } => "bad_signature",
            Refusal::Expired { .. } => "expired",
            Refusal::WrongFleet { .. } => "wrong_fleet",
            Refusal::NonceUsed => "nonce_used",
            Refusal::UsesExhausted { .. } => "uses_exhausted",
            Refusal::UnknownNode { .. } => "unknown_node",
            Refusal::Revoked { .. } => "revoked",
            Refusal::Duplicate { .. } => "duplicate",
            Refusal::Storage { .. } => "storage",
        }
    }
}

/// `unix` seconds as `YYYY-MM-DD HH:MM:SS UTC`.
pub fn utc(unix: u64) -> String {
    let days = unix / 86_400;
    let secs = unix % 86_400;
    // Civil from days (Howard Hinnant's algorithm), for days since 1970-01-01.
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02} UTC",
        secs / 3600,
        secs % 3600 / 60,
        secs % 60
    )
}
