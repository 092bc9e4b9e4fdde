//! Reading a trace for a prediction, with errors that name what is wrong:
//! the file, the field (`ops[3].duration_ns`), and a format from a newer
//! version by its name.
//!
//! The document is read as JSON first and its `format` checked before
//! anything else, so a `tandem-trace/2` file is refused as too new rather
//! than for a field this version does not know. Then each field this
//! version reads is checked for its type, so that a wrong value is named
//! by its path (serde's own message gives only a line and column), and the
//! trace is built and checked by [`Trace::check`].

use serde_json::Value;

use crate::trace::{JobClass, Trace, FORMAT};

/// The family every trace format tag starts with.
const FAMILY: &str = "tandem-trace/";

/// What a field must be.
#[derive(Clone, Copy)]
enum Ty {
    Str,
    U32,
    U64,
    Num,
    Dims,
}

impl Ty {
    fn ok(self, v: &Value) -> bool {
        match self {
            Ty::Str => v.is_string(),
            Ty::U64 => v.is_u64(),
            Ty::U32 => v.as_u64().is_some_and(|x| u32::try_from(x).is_ok()),
            Ty::Num => v.is_number(),
            Ty::Dims => v
                .as_array()
                .is_some_and(|a| a.len() == 3 && a.iter().all(|x| Ty::U32.ok(x))),
        }
    }

    fn want(self) -> &'static str {
        match self {
            Ty::Str => "a string",
            Ty::U32 => "an integer from 0 to 4294967295",
            Ty::U64 => "a non-negative integer",
            Ty::Num => "a number",
            Ty::Dims => "three integers, [x, y, z]",
        }
    }
}

const TOP: [(&str, Ty); 6] = [
    ("format", Ty::Str),
    ("job", Ty::Str),
    ("class", Ty::Str),
    ("source", Ty::Str),
    ("device", Ty::Str),
    ("notes", Ty::Str),
];

const KERNEL: [(&str, Ty); 13] = [
    ("name", Ty::Str),
    ("grid", Ty::Dims),
    ("block", Ty::Dims),
    ("blocks_per_sm", Ty::U32),
    ("duration_ns", Ty::U64),
    ("sm_share", Ty::Num),
    ("regs_per_thread", Ty::U32),
    ("smem_per_block", Ty::U32),
    ("dram_bytes", Ty::U64),
    ("graph", Ty::U32),
    ("stream", Ty::U32),
    ("host_gap_ns", Ty::U64),
    ("op", Ty::Str),
];

const COPY: [(&str, Ty); 4] = [
    ("bytes", Ty::U64),
    ("stream", Ty::U32),
    ("host_gap_ns", Ty::U64),
    ("op", Ty::Str),
];

const SYNC: [(&str, Ty); 2] = [("host_gap_ns", Ty::U64), ("op", Ty::Str)];

/// A short rendering of a JSON value for an error message.
fn shown(v: &Value) -> String {
    let s = v.to_string();
    if s.chars().count() > 40 {
        format!("{}...", s.chars().take(37).collect::<String>())
    } else {
        s
    }
}

fn check_fields(
    obj: &serde_json::Map<String, Value>,
    at: &str,
    fields: &[(&str, Ty)],
) -> Result<(), String> {
    for (name, ty) in fields {
        if let Some(v) = obj.get(*name) {
            if !ty.ok(v) {
                return Err(format!(
                    "{at}{name}: expected {}, found {}",
                    ty.want(),
                    shown(v)
                ));
            }
        }
    }
    Ok(())
}

/// Parses a trace document (`what` names it in errors: a file or a job).
///
/// # Errors
/// One line naming `what` and what is wrong with it.
pub fn parse(what: &str, text: &str) -> Result<Trace, String> {
    let e = |m: String| format!("{what}: {m}");
    let doc: Value = serde_json::from_str(text).map_err(|x| e(format!("not JSON: {x}")))?;
    let obj = doc
        .as_object()
        .ok_or_else(|| e("not a trace: the document is not a JSON object".into()))?;
    match obj.get("format") {
        None => return Err(e(format!("no \"format\" field: not a {FORMAT} trace"))),
        Some(Value::String(f)) if f == FORMAT => {}
        Some(Value::String(f)) => {
            let newer = f
                .strip_prefix(FAMILY)
                .and_then(|v| v.parse::<u32>().ok())
                .zip(
                    FORMAT
                        .strip_prefix(FAMILY)
                        .and_then(|v| v.parse::<u32>().ok()),
                )
                .is_some_and(|(theirs, ours)| theirs > ours);
            return Err(e(if newer {
                format!(
                    "trace format {f} is newer than this tandem-sim reads ({FORMAT}): update tandem-sim"
                )
            } else if f.starts_with(FAMILY) {
                format!("trace format {f} is not one this tandem-sim reads ({FORMAT})")
            } else {
                format!(
                    "format {}: not a {FORMAT} trace",
                    shown(&Value::String(f.clone()))
                )
            }));
        }
        Some(v) => return Err(e(format!("format: expected a string, found {}", shown(v)))),
    }
    check_fields(obj, "", &TOP)?;
    let ops = obj
        .get("ops")
        .ok_or_else(|| e("missing field \"ops\" (one request or one step)".into()))?
        .as_array()
        .ok_or_else(|| e("ops: expected a list of ops".into()))?;
    for (i, op) in ops.iter().enumerate() {
        let o = op
            .as_object()
            .ok_or_else(|| e(format!("ops[{i}]: expected an object, found {}", shown(op))))?;
        let at = format!("ops[{i}].");
        match o.get("op").and_then(Value::as_str) {
            Some("kernel") => check_fields(o, &at, &KERNEL),
            Some("copy_h2d" | "copy_d2h") => check_fields(o, &at, &COPY),
            Some("sync") => check_fields(o, &at, &SYNC),
            Some(other) => Err(format!(
                "{at}op: {}: expected kernel, copy_h2d, copy_d2h or sync",
                shown(&Value::String(other.into()))
            )),
            None => Err(format!(
                "{at}op: missing (kernel, copy_h2d, copy_d2h or sync)"
            )),
        }
        .map_err(e)?;
        // Required fields, named where serde would say only "missing field".
        if let Err(x) = serde_json::from_value::<crate::trace::Op>(op.clone()) {
            return Err(e(format!("ops[{i}]: {x}")));
        }
    }
    if let Some(c) = obj.get("class").and_then(Value::as_str) {
        if c != "inference" && c != "training" {
            return Err(e(format!(
                "class: \"{c}\": expected \"inference\" or \"training\""
            )));
        }
    }
    let t: Trace = serde_json::from_value(doc).map_err(|x| e(x.to_string()))?;
    t.check().map_err(|x| e(x.0))?;
    Ok(t)
}

/// A class as given on a command line or by tandemd.
///
/// # Errors
/// Anything but `inference` or `training`.
pub fn class(s: &str) -> Result<JobClass, String> {
    match s {
        "inference" => Ok(JobClass::Inference),
        "training" => Ok(JobClass::Training),
        other => Err(format!(
            "class {other:?}: a prediction needs inference or training"
        )),
    }
}

/// The name of a class.
#[must_use]
pub fn class_name(c: JobClass) -> &'static str {
    match c {
        JobClass::Inference => "inference",
        JobClass::Training => "training",
    }
}

/// Reads and parses a trace file.
///
/// # Errors
/// One line naming the file and what is wrong with it.
pub fn file(path: &std::path::Path) -> Result<Trace, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|x| format!("{}: cannot read the trace: {x}", path.display()))?;
    parse(&path.display().to_string(), &text)
}
