//! Text for messages, from bytes that may be in any server encoding.

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
}
