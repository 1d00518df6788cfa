//! Class definitions: the `pg_gatekeeper.classes` setting, parsed and checked.
//!
//! A class groups sessions (by `pg_gatekeeper.class`, which a DBA sets per
//! role or database). The setting spells a list the way PostgreSQL spells
//! storage parameters, one entry per class:
//!
//! ```text
//! pg_gatekeeper.classes = 'reporting (max_active = 2, queue_timeout = 30s), oltp (reserve = 4, weight = 3)'
//! ```
//!
//! Keys, all optional:
//! - `max_active`: most admitted transactions of the class at once (0 = no cap);
//! - `reserve`: places that only this class may take while it has sessions
//!   queued (never more than `max_active` when that is set);
//! - `weight`: its share when several classes queue (1 to 1000, default 1);
//! - `queue_timeout`: its own longest wait (a number of ms, or with a unit:
//!   `ms`, `s`, `min`, `h`; 0 = forever); unset, the session's
//!   `pg_gatekeeper.queue_timeout` applies;
//! - `max_queued`: most of its sessions queued at once (0 = unlimited).
//!
//! The class `default` holds every session with no class or an unknown one;
//! an entry named `default` sets its keys. Names are lower-case identifiers.

use std::fmt;

/// Most classes, `default` included (the shared table has this many entries).
pub const MAX_CLASSES: usize = 16;
/// Longest class name, in bytes (PostgreSQL's NAMEDATALEN - 1).
pub const MAX_NAME: usize = 63;
/// Highest weight.
pub const MAX_WEIGHT: u32 = 1000;
/// Name of the class of sessions with no (known) class.
pub const DEFAULT_CLASS: &str = "default";
/// Name of the long lane, the built-in class of long work.
pub const LONG_CLASS: &str = "long";

/// One class as the setting defines it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClassDef {
    pub name: String,
    pub params: ClassParams,
    /// Whether the entry gives `max_active` (the long lane's cap has a
    /// default of its own, which an entry that leaves it out keeps).
    pub max_active_given: bool,
}

/// The admission parameters of a class.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClassParams {
    /// Most admitted transactions at once; 0 = no cap.
    pub max_active: u32,
    /// Places held for this class while it has sessions queued.
    pub reserve: u32,
    /// Share when several classes queue; at least 1.
    pub weight: u32,
    /// Longest wait in ms (0 = forever); -1 = the session's setting.
    pub queue_timeout_ms: i64,
    /// Most sessions queued; 0 = unlimited.
    pub max_queued: u32,
}

impl Default for ClassParams {
    fn default() -> Self {
        ClassParams { max_active: 0, reserve: 0, weight: 1, queue_timeout_ms: -1, max_queued: 0 }
    }
}

/// Why a definition was refused; the message says where.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DefinitionError(pub String);

impl fmt::Display for DefinitionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

fn err<T>(msg: impl Into<String>) -> Result<T, DefinitionError> {
    Err(DefinitionError(msg.into()))
}

/// A tiny cursor over the setting's text.
struct Lexer<'a> {
    s: &'a [u8],
    at: usize,
}

impl<'a> Lexer<'a> {
    fn skip_ws(&mut self) {
        while self.at < self.s.len() && self.s[self.at].is_ascii_whitespace() {
            self.at += 1;
        }
    }
    fn peek(&mut self) -> Option<u8> {
        self.skip_ws();
        self.s.get(self.at).copied()
    }
    fn eat(&mut self, c: u8) -> bool {
        if self.peek() == Some(c) {
            self.at += 1;
            true
        } else {
            false
        }
    }
    /// A run of characters that may form a word or a value.
    fn word(&mut self) -> &'a str {
        self.skip_ws();
        let start = self.at;
        while self.at < self.s.len() && (self.s[self.at].is_ascii_alphanumeric() || self.s[self.at] == b'_') {
            self.at += 1;
        }
        // Only ASCII was consumed, so this slice is valid UTF-8.
        std::str::from_utf8(&self.s[start..self.at]).unwrap_or_default()
    }
    /// A value: everything up to a separator, so that "-1" or "5d" is
    /// reported whole rather than cut at the first odd character. A number
    /// followed by a word takes the word along ("30 s", as PostgreSQL's
    /// own settings accept).
    fn value(&mut self) -> &'a str {
        self.skip_ws();
        let start = self.at;
        self.run();
        let number = self.at > start && self.s[start..self.at].iter().all(u8::is_ascii_digit);
        let end = self.at;
        if number && self.peek().is_some_and(|c| c.is_ascii_alphabetic()) {
            self.run();
        } else {
            self.at = end;
        }
        std::str::from_utf8(&self.s[start..self.at]).unwrap_or_default()
    }
    fn run(&mut self) {
        while self.at < self.s.len()
            && !matches!(self.s[self.at], b',' | b')' | b'(')
            && !self.s[self.at].is_ascii_whitespace()
        {
            self.at += 1;
        }
    }
    fn found(&mut self) -> String {
        match self.peek() {
            None => "the end of the value".into(),
            Some(_) => {
                let rest = String::from_utf8_lossy(&self.s[self.at..]);
                format!("\"{}\"", rest.chars().take(20).collect::<String>())
            }
        }
    }
}

/// Parse the `pg_gatekeeper.classes` setting. An empty value defines no
/// class besides `default`.
pub fn parse(text: &str) -> Result<Vec<ClassDef>, DefinitionError> {
    let mut lx = Lexer { s: text.as_bytes(), at: 0 };
    let mut out: Vec<ClassDef> = vec![];
    // The names seen, for the duplicate check: a set, so that a very long
    // value costs its length, not its square, before the count refuses it.
    let mut names: std::collections::HashSet<&str> = std::collections::HashSet::new();
    if lx.peek().is_none() {
        return Ok(out);
    }
    loop {
        let name = lx.word();
        if name.is_empty() {
            return err(format!("expected a class name, found {}", lx.found()));
        }
        check_name(name)?;
        if !names.insert(name) {
            return err(format!("class \"{name}\" is defined twice"));
        }
        let mut params = ClassParams::default();
        let mut seen: Vec<&str> = vec![];
        if lx.eat(b'(') && !lx.eat(b')') {
            loop {
                let key = lx.word();
                if key.is_empty() {
                    return err(format!("class \"{name}\": expected a key, found {}", lx.found()));
                }
                if seen.contains(&key) {
                    return err(format!("class \"{name}\": key \"{key}\" is given twice"));
                }
                seen.push(key);
                if !lx.eat(b'=') {
                    return err(format!("class \"{name}\": expected \"=\" after \"{key}\", found {}", lx.found()));
                }
                let value = lx.value();
                set_key(&mut params, name, key, value)?;
                if lx.eat(b')') {
                    break;
                }
                if !lx.eat(b',') {
                    return err(format!("class \"{name}\": expected \",\" or \")\", found {}", lx.found()));
                }
            }
        }
        if name == LONG_CLASS && seen.contains(&"max_active") && params.max_active == 0 {
            return err(format!(
                "class \"{LONG_CLASS}\": max_active must be at least 1: the long lane's holders take no ticket, so its cap is all that bounds them"
            ));
        }
        if params.max_active > 0 && params.reserve > params.max_active {
            return err(format!(
                "class \"{name}\": reserve ({}) is larger than max_active ({})",
                params.reserve, params.max_active
            ));
        }
        out.push(ClassDef { name: name.to_string(), params, max_active_given: seen.contains(&"max_active") });
        if lx.peek().is_none() {
            break;
        }
        if !lx.eat(b',') {
            return err(format!("expected \",\" between classes, found {}", lx.found()));
        }
    }
    // `default` and `long` always have their entries in the table.
    let named = out.iter().filter(|d| d.name != DEFAULT_CLASS && d.name != LONG_CLASS).count();
    if named > MAX_CLASSES - 2 {
        return err(format!(
            "{named} classes are defined; at most {} besides \"{DEFAULT_CLASS}\" and \"{LONG_CLASS}\"",
            MAX_CLASSES - 2
        ));
    }
    Ok(out)
}

/// Whether `name` could name a class: what [`parse`] accepts (lower-case
/// letters, digits and underscores, not starting with a digit, at most
/// [`MAX_NAME`] bytes).
pub fn is_valid_name(name: &str) -> bool {
    !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') && check_name(name).is_ok()
}

fn check_name(name: &str) -> Result<(), DefinitionError> {
    let first = name.as_bytes()[0];
    if !(first.is_ascii_lowercase() || first == b'_') || name.bytes().any(|b| b.is_ascii_uppercase()) {
        return err(format!(
            "invalid class name \"{name}\": use lower-case letters, digits and underscores, starting with a letter or an underscore"
        ));
    }
    if name.len() > MAX_NAME {
        return err(format!("class name \"{name}\" is longer than {MAX_NAME} bytes"));
    }
    Ok(())
}

fn number(class: &str, key: &str, value: &str, max: u64) -> Result<u64, DefinitionError> {
    // Digits only: Rust's parse would also take a leading '+'.
    let digits = value.bytes().all(|b| b.is_ascii_digit());
    match value.parse::<u64>() {
        Ok(n) if digits && n <= max => Ok(n),
        _ if value.is_empty() => err(format!("class \"{class}\": {key} needs a value")),
        _ => err(format!("class \"{class}\": invalid value \"{value}\" for {key} (a whole number from 0 to {max})")),
    }
}

/// A duration in milliseconds: digits with an optional unit.
pub fn parse_duration_ms(value: &str) -> Option<u64> {
    let split = value.find(|c: char| !c.is_ascii_digit()).unwrap_or(value.len());
    let (digits, unit) = value.split_at(split);
    let unit = unit.trim_start();
    let n: u64 = digits.parse().ok()?;
    let scale = match unit {
        "" | "ms" => 1,
        "s" => 1000,
        "min" => 60_000,
        "h" => 3_600_000,
        _ => return None,
    };
    n.checked_mul(scale).filter(|&ms| ms <= i32::MAX as u64)
}

fn set_key(p: &mut ClassParams, class: &str, key: &str, value: &str) -> Result<(), DefinitionError> {
    const MAX_COUNT: u64 = 0x3FFFF; // PostgreSQL's MAX_BACKENDS
    match key {
        "max_active" => p.max_active = number(class, key, value, MAX_COUNT)? as u32,
        "reserve" => p.reserve = number(class, key, value, MAX_COUNT)? as u32,
        "max_queued" => p.max_queued = number(class, key, value, MAX_COUNT)? as u32,
        "weight" => {
            let w = number(class, key, value, MAX_WEIGHT as u64)? as u32;
            if w == 0 {
                return err(format!("class \"{class}\": weight must be at least 1"));
            }
            p.weight = w;
        }
        "queue_timeout" => match parse_duration_ms(value) {
            Some(ms) => p.queue_timeout_ms = ms as i64,
            None => {
                return err(format!(
                "class \"{class}\": invalid value \"{value}\" for queue_timeout (e.g. 500ms, 30s, 2min; 0 = forever; at most {}ms, about 24 days)",
                i32::MAX
            ))
            }
        },
        _ => {
            return err(format!(
            "class \"{class}\": unknown key \"{key}\" (known: max_active, reserve, weight, queue_timeout, max_queued)"
        ))
        }
    }
    Ok(())
}

/// A class name in a fixed buffer, for shared memory.
#[repr(C)]
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct ClassName {
    len: u8,
    bytes: [u8; MAX_NAME],
}

impl Default for ClassName {
    fn default() -> Self {
        ClassName { len: 0, bytes: [0; MAX_NAME] }
    }
}

impl ClassName {
    /// The name, cut at [`MAX_NAME`] bytes on a character boundary.
    pub fn new(s: &str) -> ClassName {
        let mut end = s.len().min(MAX_NAME);
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        let mut n = ClassName { len: end as u8, ..ClassName::default() };
        n.bytes[..end].copy_from_slice(&s.as_bytes()[..end]);
        n
    }
    pub fn as_str(&self) -> &str {
        std::str::from_utf8(&self.bytes[..self.len as usize]).unwrap_or_default()
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl fmt::Debug for ClassName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_documented_example() {
        let d = parse("reporting (max_active = 2, queue_timeout = 30s), oltp (reserve = 4, weight = 3)").unwrap();
        assert_eq!(d.len(), 2);
        assert_eq!(d[0].name, "reporting");
        assert_eq!(d[0].params, ClassParams { max_active: 2, queue_timeout_ms: 30_000, ..ClassParams::default() });
        assert_eq!(d[1].params, ClassParams { reserve: 4, weight: 3, ..ClassParams::default() });
        // A unit may stand apart from its number, as in PostgreSQL's settings.
        let spaced = parse("reporting (queue_timeout = 30 s , max_active = 2)").unwrap();
        assert_eq!(spaced[0].params, ClassParams { max_active: 2, queue_timeout_ms: 30_000, ..ClassParams::default() });
    }

    #[test]
    fn empty_values_and_bare_names() {
        assert_eq!(parse("").unwrap(), vec![]);
        assert_eq!(parse("   ").unwrap(), vec![]);
        let d = parse("batch, default (max_queued = 100), x ()").unwrap();
        assert_eq!(d.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(), ["batch", "default", "x"]);
        assert_eq!(d[0].params, ClassParams::default());
        assert_eq!(d[1].params.max_queued, 100);
        let tight = parse("a(max_active=1,reserve=1,weight=7,queue_timeout=0,max_queued=3)").unwrap();
        assert_eq!(
            tight[0].params,
            ClassParams { max_active: 1, reserve: 1, weight: 7, queue_timeout_ms: 0, max_queued: 3 }
        );
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration_ms("250"), Some(250));
        assert_eq!(parse_duration_ms("250ms"), Some(250));
        assert_eq!(parse_duration_ms("2s"), Some(2000));
        assert_eq!(parse_duration_ms("3min"), Some(180_000));
        assert_eq!(parse_duration_ms("1h"), Some(3_600_000));
        assert_eq!(parse_duration_ms("30 s"), Some(30_000));
        assert_eq!(parse_duration_ms("+30s"), None);
        assert_eq!(parse_duration_ms("1d"), None);
        assert_eq!(parse_duration_ms("s"), None);
        assert_eq!(parse_duration_ms("9999999h"), None);
    }

    #[test]
    fn refuses_bad_definitions_with_a_reason() {
        let cases = [
            ("a (max_active = 2", "expected \",\" or \")\""),
            ("a (max_active 2)", "expected \"=\" after \"max_active\""),
            ("a (size = 2)", "unknown key \"size\""),
            ("a (weight = 0)", "weight must be at least 1"),
            ("a (weight = 1001)", "invalid value \"1001\" for weight"),
            ("a (max_active = -1)", "invalid value \"-1\" for max_active"),
            ("a (max_active = +2)", "invalid value \"+2\" for max_active"),
            ("a (max_active = 2 s)", "invalid value \"2 s\" for max_active"),
            ("long (max_active = 0)", "max_active must be at least 1"),
            ("a (queue_timeout = 30 s s)", "expected \",\" or \")\""),
            ("a (max_active = )", "max_active needs a value"),
            ("a (max_active = 2, reserve = 3)", "reserve (3) is larger than max_active (2)"),
            ("a (queue_timeout = 5d)", "invalid value \"5d\" for queue_timeout"),
            ("a, a", "defined twice"),
            ("a (weight = 1, weight = 2)", "given twice"),
            ("Reports", "invalid class name"),
            ("9lives", "invalid class name"),
            ("a b", "expected \",\" between classes"),
            (", a", "expected a class name"),
            ("a,", "expected a class name"),
        ];
        for (text, want) in cases {
            let e = parse(text).expect_err(text);
            assert!(e.0.contains(want), "{text:?}: {e} does not mention {want:?}");
        }
        let many: Vec<String> = (0..MAX_CLASSES).map(|i| format!("c{i}")).collect();
        // The table holds `default`, `long` and 14 more.
        let most = MAX_CLASSES - 2;
        assert!(parse(&many[..most + 1].join(",")).unwrap_err().0.contains("at most 14"));
        assert!(parse(&format!("{},long", many[..most + 1].join(","))).unwrap_err().0.contains("at most 14"));
        assert!(parse(&format!("{},default,long", many[..most].join(","))).is_ok());
        assert!(parse(&"x".repeat(64)).unwrap_err().0.contains("longer than 63"));
    }

    #[test]
    fn an_entry_says_whether_it_gives_max_active() {
        let defs = parse("long (queue_timeout = 30s), r (max_active = 0)").unwrap();
        assert!(!defs[0].max_active_given);
        assert!(defs[1].max_active_given);
    }

    #[test]
    fn names_in_fixed_buffers() {
        assert_eq!(ClassName::new("reporting").as_str(), "reporting");
        assert!(ClassName::default().is_empty());
        assert_eq!(ClassName::new(&"é".repeat(40)).as_str().len(), 62);
    }
}
