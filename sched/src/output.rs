//! What the scheduler asks for: [`Output`]s, with a training client's launch
//! [`Allowance`] and [`LocalBudget`].

use crate::input::ClientId;
#[cfg(doc)]
use crate::input::Input;

/// How many more launches a client may start beyond those the scheduler has
/// seen (see "Launch limits" in the [module docs](crate)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Allowance {
    /// No limit (inference; training with nothing to protect; disabled).
    Unlimited,
    /// At most this many more launch calls (a graph launch is one).
    Launches(u64),
}

impl Output {
    /// The client an output is for.
    #[must_use]
    pub fn client(&self) -> Option<ClientId> {
        Some(match *self {
            Output::Gate { client, .. }
            | Output::Limit { client, .. }
            | Output::Budget { client, .. }
            | Output::Estimate { client, .. }
            | Output::Marks { client, .. } => client,
        })
    }
}

/// A training client's local in-flight bound (the control block's
/// budgets; see "Local bound" in the [module docs](crate)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct LocalBudget {
    /// Estimated ns the client may have in flight while no inference is
    /// active on its GPU.
    pub idle_ns: u64,
    /// The same while inference is active.
    pub active_ns: u64,
    /// What a launch whose kernel has no published estimate is charged.
    pub default_est_ns: u64,
    /// How long after an inference bump its GPU counts as active.
    pub hold_ns: u64,
}

/// What the scheduler asks for. Only changes are emitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Output {
    /// Open or close `client`'s gate.
    Gate {
        /// Whose.
        client: ClientId,
        /// `true`: open.
        open: bool,
    },
    /// `client` may start this many launches beyond the ones it had started
    /// when the caller last read its launch counter (the control block's
    /// `launches`): store `launches + n` as its `launch_limit`
    /// ([`Allowance::Unlimited`]: 0). Emitted when the allowance changes; the
    /// caller re-stores `launches + n` whenever it reads a new `launches`.
    Limit {
        /// Whose.
        client: ClientId,
        /// How many more.
        beyond: Allowance,
    },
    /// `client`'s local in-flight bound: store it in its control block
    /// (`None`: no bound, zeros). Emitted when it changes (the default
    /// estimate only when it moves by an eighth or more).
    Budget {
        /// Whose.
        client: ClientId,
        /// The bound; `None`: none.
        budget: Option<LocalBudget>,
    },
    /// Publish `ns` as the estimate of one launch of kernel `key` into
    /// `client`'s estimate table. Emitted when a measurement first sets it
    /// or moves it by an eighth or more.
    Estimate {
        /// Whose.
        client: ClientId,
        /// The kernel's key (what [`Input::Launch`] carried as `func_id`).
        key: u64,
        /// Estimated ns of one launch.
        ns: u64,
    },
    /// Ask `client` for completion marks at most every `every_ns` (0: none):
    /// store it as the control block's `mark_every_ns`. Emitted when the
    /// value wanted for the client changes (a new client starts at 0, as a
    /// fresh control block does).
    Marks {
        /// Whose.
        client: ClientId,
        /// Mark interval, ns; 0: no marks.
        every_ns: u64,
    },
}
