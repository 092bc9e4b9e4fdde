//! The open-file limit (`RLIMIT_NOFILE`): what it is, and raising the soft
//! limit to the hard one (tandemd holds a few descriptors per job).

use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};

use crate::error::{Error, Result};

/// A soft and a hard limit (`u64::MAX`: unlimited).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limit {
    /// The limit in force.
    pub soft: u64,
    /// How far an unprivileged process may raise `soft`.
    pub hard: u64,
}

/// The open-file limit now.
///
/// # Errors
/// None in practice (`getrlimit` cannot fail for this resource); kept for
/// symmetry with [`set_nofile_soft`].
pub fn nofile() -> Result<Limit> {
    let l = getrlimit(Resource::Nofile);
    Ok(Limit {
        soft: l.current.unwrap_or(u64::MAX),
        hard: l.maximum.unwrap_or(u64::MAX),
    })
}

/// Sets the soft open-file limit to `soft` (at most the hard limit).
///
/// # Errors
/// `setrlimit` failing (`EINVAL` above the hard limit, or above the
/// kernel's `nr_open`).
pub fn set_nofile_soft(soft: u64) -> Result<Limit> {
    let now = nofile()?;
    setrlimit(
        Resource::Nofile,
        Rlimit {
            current: (soft != u64::MAX).then_some(soft),
            maximum: (now.hard != u64::MAX).then_some(now.hard),
        },
    )
    .map_err(Error::at("setrlimit(RLIMIT_NOFILE)"))?;
    nofile()
}

/// Raises the soft open-file limit to the hard one; returns (before, after).
///
/// # Errors
/// `setrlimit` failing.
pub fn raise_nofile() -> Result<(Limit, Limit)> {
    let before = nofile()?;
    if before.soft >= before.hard {
        return Ok((before, before));
    }
    let after = set_nofile_soft(before.hard)?;
    Ok((before, after))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_soft_limit_is_raised_to_the_hard_one() {
        let start = nofile().unwrap();
        assert!(start.soft <= start.hard);
        let (_, after) = raise_nofile().unwrap();
        assert_eq!(after.soft, after.hard);
        // Lowering the soft limit is always allowed; put it back.
        let lowered = set_nofile_soft(start.soft).unwrap();
        assert_eq!(lowered.soft, start.soft);
    }
}
