//! The one place for the limits and the character set of text that enters from outside (API bodies, webhook
//! events, PSP answers). Every value we store can be written to DynamoDB and sent to SQS:
//!
//! - **Characters**: no control characters (C0, DEL, C1: a single-line field has no use for them, and
//!   terminals and logs do), no Unicode non-characters (U+FDD0..U+FDEF and U+xFFFE/U+xFFFF of every plane),
//!   which is a strict subset of what SQS accepts in a message (`#x9 #xA #xD #x20-#xD7FF #xE000-#xFFFD
//!   #x10000-#x10FFFF`; a Rust `char` is never a surrogate).
//! - **Lengths** in characters, chosen so an item can never reach DynamoDB's 400 KB (a payment holds a few of
//!   these fields, each at most a few KB) and no key its 1 KB sort-key limit (keys are built from the ids of
//!   `crate::ids`, at most 128 characters of ASCII).
//!
//! The id types (`crate::ids`), the secrets (`crate::secret`) and the metadata (`crate::metadata`) check
//! through here; free text (reasons, accounts) calls [`bounded`] where it enters.

use crate::error::DomainError;

/// A decline code, a failure or cancellation reason.
pub const MAX_REASON_CHARS: usize = 200;
/// A client secret or a retry token (Stripe's client secrets are under 100 characters).
pub const MAX_SECRET_CHARS: usize = 512;
/// A redirect URL (Stripe's 3-D Secure URLs are under 300 characters; browsers take 2 KB safely).
pub const MAX_URL_CHARS: usize = 2048;
/// A PSP account id (`acct_...`).
pub const MAX_ACCOUNT_CHARS: usize = 128;
/// A payment method a checkout names (`pm_...`).
pub const MAX_PAYMENT_METHOD_CHARS: usize = 64;

/// Whether `c` may appear in a value we accept: printable, no control character, no non-character.
pub fn is_allowed(c: char) -> bool {
    !c.is_control() && !is_noncharacter(c)
}

/// Unicode's non-characters: U+FDD0..U+FDEF and the last two code points of every plane.
pub fn is_noncharacter(c: char) -> bool {
    let n = u32::from(c);
    (0xFDD0..=0xFDEF).contains(&n) || (n & 0xFFFE) == 0xFFFE
}

/// Whether `c` may be sent in an SQS message (body or attribute): `#x9 #xA #xD #x20-#xD7FF #xE000-#xFFFD
/// #x10000-#x10FFFF`.
pub fn is_sqs_char(c: char) -> bool {
    matches!(u32::from(c), 0x9 | 0xA | 0xD | 0x20..=0xD7FF | 0xE000..=0xFFFD | 0x10000..=0x10FFFF)
}

/// Checks `value` as it is: not empty, at most `max` characters, every character [`is_allowed`].
pub fn check(field: &'static str, value: &str, max: usize) -> Result<(), DomainError> {
    if value.is_empty() {
        return Err(DomainError::Empty { field });
    }
    // Counting stops past `max`, so a huge value costs no more than a short one.
    if value.chars().nth(max).is_some() {
        return Err(DomainError::TooLong { field, max });
    }
    if !value.chars().all(is_allowed) {
        return Err(DomainError::BadText { field });
    }
    Ok(())
}

/// Free text from outside, trimmed and checked ([`check`]): the value to store.
pub fn bounded(field: &'static str, value: &str, max: usize) -> Result<String, DomainError> {
    let value = value.trim();
    check(field, value, max)?;
    Ok(value.to_owned())
}

/// Text we must keep even when it breaks the rules (a reason in a PSP's answer to a status query, which
/// recovery cannot refuse): every character not [`is_allowed`] becomes U+FFFD, cut at `max` characters.
pub fn sanitized(value: &str, max: usize) -> String {
    value
        .trim()
        .chars()
        .map(|c| if is_allowed(c) { c } else { char::REPLACEMENT_CHARACTER })
        .take(max)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_and_non_characters_are_refused() {
        for bad in [
            "a\u{0}b",
            "a\u{7}",
            "tab\there",
            "line\nbreak",
            "\u{7f}",
            "\u{85}",
            "x\u{FFFF}",
            "\u{FFFE}",
        ] {
            assert_eq!(
                check("reason", bad, 200),
                Err(DomainError::BadText { field: "reason" }),
                "{bad:?}"
            );
        }
        for c in ['\u{FDD0}', '\u{FDEF}', '\u{1FFFF}', '\u{10FFFE}'] {
            assert!(!is_allowed(c), "{c:?}");
        }
        assert!(check("reason", "insufficient_funds — carte refusée ✓ 🙂", 200).is_ok());
    }

    #[test]
    fn every_allowed_character_is_one_sqs_takes() {
        for n in (0..=0x10FFFF)
            .step_by(7)
            .chain([0xD7FF, 0xE000, 0xFFFD, 0x10000, 0x10FFFF])
        {
            if let Some(c) = char::from_u32(n) {
                assert!(!is_allowed(c) || is_sqs_char(c), "U+{n:04X}");
            }
        }
        assert!(!is_sqs_char('\u{FFFF}') && !is_sqs_char('\u{1}') && is_sqs_char('\n'));
    }

    #[test]
    fn lengths_are_counted_in_characters() {
        assert!(check("reason", &"é".repeat(200), 200).is_ok());
        assert_eq!(
            check("reason", &"é".repeat(201), 200),
            Err(DomainError::TooLong {
                field: "reason",
                max: 200
            })
        );
        assert_eq!(check("reason", "", 200), Err(DomainError::Empty { field: "reason" }));
        assert_eq!(
            bounded("reason", "  card_declined ", 200).as_deref(),
            Ok("card_declined")
        );
        assert!(bounded("reason", "   ", 200).is_err());
    }

    #[test]
    fn sanitized_text_always_passes_the_check() {
        let s = sanitized(&format!("bad\u{FFFF}\u{0}{}", "x".repeat(300)), 200);
        assert_eq!(s.chars().count(), 200);
        assert!(s.starts_with("bad\u{FFFD}\u{FFFD}"));
        assert!(check("reason", &s, 200).is_ok());
    }
}
