//! Text for messages, from bytes that may be in any server encoding.

use std::borrow::Cow;

/// `bytes` with every byte that is not printable ASCII written as `\xNN`
/// (PostgreSQL's own escape for such bytes in `application_name`): the
/// result is ASCII, valid in every server encoding, so an error message may
/// quote input whose encoding the caller cannot read.
pub fn escape_non_ascii(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for &b in bytes {
        if (0x20..0x7f).contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    out
}

/// `bytes` (a setting's value, an argument in the server's encoding) as
/// text to parse and to quote: as they are where they are valid UTF-8, and
/// otherwise with every byte outside printable ASCII escaped
/// ([`escape_non_ascii`]). It depends on the bytes alone, so every process
/// reads a setting alike, whatever its database's encoding; and a message
/// quoting the result holds either the input's own bytes, whole, or ASCII.
pub fn utf8_or_escaped(bytes: &[u8]) -> Cow<'_, str> {
    match std::str::from_utf8(bytes) {
        Ok(s) => Cow::Borrowed(s),
        Err(_) => Cow::Owned(escape_non_ascii(bytes)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn printable_ascii_is_kept_and_the_rest_escaped() {
        assert_eq!(escape_non_ascii(b"rep_1 \"x\" \\y"), "rep_1 \"x\" \\y");
        assert_eq!(escape_non_ascii(b"rep\xe9"), "rep\\xe9");
        assert_eq!(escape_non_ascii("ré".as_bytes()), "r\\xc3\\xa9");
        assert_eq!(escape_non_ascii(b"a\nb\x7f"), "a\\x0ab\\x7f");
        assert_eq!(escape_non_ascii(b""), "");
    }

    #[test]
    fn utf8_is_kept_whole_and_anything_else_escaped_whole() {
        assert!(matches!(utf8_or_escaped("ré, x".as_bytes()), Cow::Borrowed("ré, x")));
        // LATIN1's é makes the value not UTF-8: every byte outside ASCII is
        // escaped, not only the offending one.
        assert_eq!(utf8_or_escaped(b"r\xc3\xa9 \xe9"), "r\\xc3\\xa9 \\xe9");
    }
}
