//! Where in the file a TOML error is: its line and column, and the dotted
//! key on that line (for errors that name the key).

pub(super) fn line_col(text: &str, at: usize) -> (usize, usize) {
    let at = at.min(text.len());
    let before = &text.as_bytes()[..at];
    let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
    let col = at
        - before
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |p| p + 1)
        + 1;
    (line, col)
}

/// The dotted key whose line holds byte `at`: `[table]` headers above it plus
/// the bare key before `=` on its line (a heuristic good for this file's shape).
pub(super) fn key_at(text: &str, at: usize) -> Option<String> {
    let at = at.min(text.len());
    let start = text[..at].rfind('\n').map_or(0, |p| p + 1);
    let line = text[start..].lines().next().unwrap_or("").trim();
    let mut table = String::new();
    for l in text[..start].lines() {
        let l = l.trim();
        if let Some(h) = l.strip_prefix("[[").and_then(|h| h.strip_suffix("]]")) {
            table = h.trim().to_string();
        } else if let Some(h) = l.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
            table = h.trim().to_string();
        }
    }
    let key = if line.starts_with('[') {
        line.trim_matches(|c| c == '[' || c == ']')
            .trim()
            .to_string()
    } else {
        let k = line.split('=').next().unwrap_or("").trim();
        if k.is_empty() {
            return if table.is_empty() { None } else { Some(table) };
        }
        if table.is_empty() {
            k.to_string()
        } else {
            format!("{table}.{k}")
        }
    };
    Some(key)
}
