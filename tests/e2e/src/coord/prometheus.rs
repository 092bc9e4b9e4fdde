//! Prometheus text: parsing and checks.

use std::collections::BTreeMap;

/// One sample line of Prometheus text.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// Metric name.
    pub name: String,
    /// Labels.
    pub labels: BTreeMap<String, String>,
    /// Value.
    pub value: f64,
}

/// A Prometheus text exposition (format 0.0.4), checked line by line.
#[derive(Debug, Default)]
pub struct Exposition {
    /// Every sample, in order.
    pub samples: Vec<Sample>,
    /// `# TYPE` per metric family.
    pub types: BTreeMap<String, String>,
    /// `# HELP` per metric family.
    pub help: BTreeMap<String, String>,
}

impl Exposition {
    /// Samples of metric `name`.
    pub fn get(&self, name: &str) -> Vec<&Sample> {
        self.samples.iter().filter(|s| s.name == name).collect()
    }
}

fn is_metric_name(s: &str) -> bool {
    let mut c = s.chars();
    matches!(c.next(), Some(ch) if ch.is_ascii_alphabetic() || ch == '_' || ch == ':')
        && c.all(|ch| ch.is_ascii_alphanumeric() || ch == '_' || ch == ':')
}

fn is_label_name(s: &str) -> bool {
    let mut c = s.chars();
    matches!(c.next(), Some(ch) if ch.is_ascii_alphabetic() || ch == '_')
        && c.all(|ch| ch.is_ascii_alphanumeric() || ch == '_')
}

fn parse_value(s: &str) -> Option<f64> {
    match s {
        "NaN" => Some(f64::NAN),
        "+Inf" | "Inf" => Some(f64::INFINITY),
        "-Inf" => Some(f64::NEG_INFINITY),
        _ => s.parse().ok(),
    }
}

/// The family a sample belongs to (histogram/summary suffixes stripped when
/// the base name has such a TYPE).
fn family<'a>(name: &'a str, types: &BTreeMap<String, String>) -> &'a str {
    for suf in ["_bucket", "_sum", "_count"] {
        if let Some(base) = name.strip_suffix(suf) {
            if matches!(
                types.get(base).map(String::as_str),
                Some("histogram" | "summary")
            ) {
                return base;
            }
        }
    }
    name
}

/// Parses and checks Prometheus text format 0.0.4: every line is a comment,
/// a `# HELP`/`# TYPE` line, or `name{label="value",...} value [timestamp]`
/// with valid names, properly escaped label values and a float value; at most
/// one HELP and one TYPE per family, TYPE before the family's first sample,
/// a family's samples contiguous, no duplicate series, and the text ends with
/// a newline.
pub fn parse_prometheus(text: &str) -> Result<Exposition, String> {
    let mut ex = Exposition::default();
    let mut seen_series = std::collections::BTreeSet::new();
    let mut finished_families = std::collections::BTreeSet::new();
    let mut current: Option<String> = None;
    if !text.is_empty() && !text.ends_with('\n') {
        return Err("text does not end with a newline".into());
    }
    for (i, line) in text.lines().enumerate() {
        let ln = i + 1;
        let err = |m: &str| format!("line {ln}: {m}: {line:?}");
        if line.trim().is_empty() {
            continue;
        }
        if let Some(rest) = line.strip_prefix('#') {
            let rest = rest.trim_start();
            let mut it = rest.splitn(3, ' ');
            let kw = it.next().unwrap_or("");
            if kw != "HELP" && kw != "TYPE" {
                continue; // plain comment
            }
            let name = it.next().ok_or_else(|| err("no metric name"))?;
            if !is_metric_name(name) {
                return Err(err("bad metric name"));
            }
            let arg = it.next().unwrap_or("");
            if kw == "HELP" {
                if ex.help.insert(name.into(), arg.into()).is_some() {
                    return Err(err("second HELP for this metric"));
                }
            } else {
                if !matches!(
                    arg,
                    "counter" | "gauge" | "histogram" | "summary" | "untyped"
                ) {
                    return Err(err("bad TYPE"));
                }
                if ex
                    .samples
                    .iter()
                    .any(|s| family(&s.name, &ex.types) == name)
                {
                    return Err(err("TYPE after the family's samples"));
                }
                if ex.types.insert(name.into(), arg.into()).is_some() {
                    return Err(err("second TYPE for this metric"));
                }
            }
            continue;
        }
        // name{labels} value [timestamp]
        let name_end = line.find(['{', ' ', '\t']).ok_or_else(|| err("no value"))?;
        let name = &line[..name_end];
        if !is_metric_name(name) {
            return Err(err("bad metric name"));
        }
        let mut rest = &line[name_end..];
        let mut labels = BTreeMap::new();
        if let Some(r) = rest.strip_prefix('{') {
            let mut chars = r.char_indices().peekable();
            let mut consumed = None;
            loop {
                while chars.peek().is_some_and(|(_, c)| *c == ' ' || *c == ',') {
                    chars.next();
                }
                match chars.peek() {
                    Some((j, '}')) => {
                        consumed = Some(j + 1);
                        break;
                    }
                    None => break,
                    _ => {}
                }
                let mut lname = String::new();
                while let Some(&(_, c)) = chars.peek() {
                    if c == '=' {
                        break;
                    }
                    lname.push(c);
                    chars.next();
                }
                let lname = lname.trim().to_string();
                if !is_label_name(&lname) {
                    return Err(err(&format!("bad label name {lname:?}")));
                }
                if chars.next().map(|(_, c)| c) != Some('=') {
                    return Err(err("label without '='"));
                }
                if chars.next().map(|(_, c)| c) != Some('"') {
                    return Err(err("label value not quoted"));
                }
                let mut val = String::new();
                let mut closed = false;
                while let Some((_, c)) = chars.next() {
                    match c {
                        '"' => {
                            closed = true;
                            break;
                        }
                        '\\' => match chars.next().map(|(_, c)| c) {
                            Some('\\') => val.push('\\'),
                            Some('"') => val.push('"'),
                            Some('n') => val.push('\n'),
                            _ => return Err(err("bad escape in label value")),
                        },
                        '\n' => return Err(err("newline in label value")),
                        c => val.push(c),
                    }
                }
                if !closed {
                    return Err(err("unterminated label value"));
                }
                if labels.insert(lname.clone(), val).is_some() {
                    return Err(err(&format!("duplicate label {lname}")));
                }
                match chars.peek() {
                    Some((_, ',')) | Some((_, '}')) => {}
                    _ => return Err(err("expected ',' or '}' after a label")),
                }
            }
            let end = consumed.ok_or_else(|| err("unterminated label set"))?;
            rest = &r[end..];
        }
        let mut toks = rest.split_whitespace();
        let v = toks.next().ok_or_else(|| err("no value"))?;
        let value = parse_value(v).ok_or_else(|| err("bad value"))?;
        if let Some(ts) = toks.next() {
            ts.parse::<i64>().map_err(|_| err("bad timestamp"))?;
        }
        if toks.next().is_some() {
            return Err(err("trailing tokens"));
        }
        let fam = family(name, &ex.types).to_string();
        if current.as_deref() != Some(fam.as_str()) {
            if let Some(prev) = current.take() {
                finished_families.insert(prev);
            }
            if finished_families.contains(&fam) {
                return Err(err("samples of one family are not contiguous"));
            }
            current = Some(fam);
        }
        let series = format!("{name}{labels:?}");
        if !seen_series.insert(series) {
            return Err(err("duplicate series"));
        }
        ex.samples.push(Sample {
            name: name.to_string(),
            labels,
            value,
        });
    }
    Ok(ex)
}
