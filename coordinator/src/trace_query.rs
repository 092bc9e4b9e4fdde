//! `GET /trace?id=N[&seconds=S]` on the stats socket: client N's capture
//! window ([`crate::capture`]) copied under the registry's lock, the trace
//! built outside it.

use std::collections::HashMap;

use tandem_proto::wire::{ClientClass, FuncAttrs};
use tandem_trace::JobClass;

use crate::capture::{build, is_launch, Source, DEFAULT_SECONDS, MAX_SECONDS};
use crate::shared::Shared;

/// Why no trace: the HTTP status and a one-line text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    /// 400 (bad query), 404 (no such live client), 409 (not enough data).
    pub status: u16,
    /// One line, naming what was wrong.
    pub message: String,
}

fn refused(status: u16, message: String) -> Refused {
    Refused { status, message }
}

/// The client id and look back a query string (`id=N&seconds=S`) asks for.
///
/// # Errors
/// A 400 naming the parameter that is missing or malformed.
pub fn parse_query(query: &str) -> Result<(u64, u64), Refused> {
    let (mut id, mut seconds) = (None, DEFAULT_SECONDS);
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        match k {
            "id" => {
                id = Some(v.parse::<u64>().map_err(|_| {
                    refused(
                        400,
                        format!("id={v:?} is not a client id (a number, see tandemctl status)"),
                    )
                })?);
            }
            "seconds" => {
                seconds = v
                    .parse::<u64>()
                    .ok()
                    .filter(|s| (1..=MAX_SECONDS).contains(s))
                    .ok_or_else(|| {
                        refused(400, format!("seconds={v:?} is not a whole number of seconds from 1 to {MAX_SECONDS}"))
                    })?;
            }
            _ => {
                return Err(refused(
                    400,
                    format!("unknown parameter {k:?}: GET /trace?id=N[&seconds=S]"),
                ))
            }
        }
    }
    let id = id.ok_or_else(|| {
        refused(
            400,
            "GET /trace needs id=N (a client id, see tandemctl status)".into(),
        )
    })?;
    Ok((id, seconds))
}

/// Client `id`'s trace over the last `seconds`, as JSON.
///
/// # Errors
/// 404 when no live client has that id; 409 when capture is off or the
/// window holds no whole request or step.
pub fn trace_json(shared: &Shared, id: u64, seconds: u64) -> Result<String, Refused> {
    let (src, records, names) = {
        let reg = shared.registry();
        let Some(c) = reg.clients.get(&id) else {
            return Err(refused(
                404,
                format!("no live client with id {id} (see tandemctl status)"),
            ));
        };
        if reg.trace_cfg.window == 0 {
            return Err(refused(
                409,
                "capture is off: [trace] window = 0 in tandemd.toml".into(),
            ));
        }
        let since = c.capture.last_ts().map_or(0, |t| {
            t.saturating_sub(seconds.saturating_mul(1_000_000_000))
        });
        let records = c.capture.copy_since(since);
        let names: HashMap<u64, (String, Option<FuncAttrs>)> = records
            .iter()
            .filter(|r| is_launch(r.kind))
            .filter_map(|r| {
                let (name, attrs) = c.stats.func(r.func_id)?;
                Some((r.func_id, (name.to_string(), attrs)))
            })
            .collect();
        let job = c
            .exe
            .rsplit('/')
            .next()
            .filter(|s| !s.is_empty())
            .unwrap_or("job")
            .to_string();
        let src = Source {
            client: id,
            job,
            class: match c.decision.class {
                ClientClass::Inference => JobClass::Inference,
                ClientClass::Training | ClientClass::Auto => JobClass::Training,
            },
            device: c
                .gpu
                .and_then(|g| reg.gpus.get(&g))
                .map(|g| g.name.clone())
                .unwrap_or_default(),
            seconds,
            idle_gap_ns: reg.sched_cfg().request_idle_gap_ns,
        };
        (src, records, names)
    };
    let trace = build(&src, &records, |f| names.get(&f).cloned()).map_err(|m| refused(409, m.0))?;
    Ok(trace.to_json() + "\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_query_names_a_client_and_a_bounded_look_back() {
        assert_eq!(parse_query("id=3"), Ok((3, DEFAULT_SECONDS)));
        assert_eq!(parse_query("seconds=30&id=7"), Ok((7, 30)));
        for (q, want) in [
            ("", "needs id=N"),
            ("id=x", "not a client id"),
            ("id=1&seconds=0", "from 1 to 600"),
            ("id=1&seconds=601", "from 1 to 600"),
            ("id=1&gpu=2", "unknown parameter \"gpu\""),
        ] {
            let e = parse_query(q).expect_err(q);
            assert_eq!(e.status, 400, "{q}");
            assert!(e.message.contains(want), "{q}: {}", e.message);
            assert!(!e.message.contains('\n'), "one line: {q}");
        }
    }
}
