//! The follow-mode regions of this process: what it shares (and may have to
//! offer again after a coordinator restart) and what it maps of others'.

use std::os::fd::OwnedFd;

use crate::types::{CUdeviceptr, CUmemGenericAllocationHandle};

/// Which side of follow mode a region is on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Allocated here, read-write; `offered` while tandemd has accepted it.
    Shared { offered: bool },
    /// Another job's region, mapped read-only here.
    Followed,
}

/// One region: a reservation of `span` bytes at `base`, all of it mapping
/// one physical allocation (`handle`).
#[derive(Debug)]
pub struct Region {
    pub base: CUdeviceptr,
    pub span: u64,
    /// What the program asked for (the `len` in messages).
    pub bytes: u64,
    pub handle: CUmemGenericAllocationHandle,
    /// The context it was made in (as an address).
    pub ctx: usize,
    pub role: Role,
    pub name: Vec<u8>,
    pub layout: [u8; 16],
    /// A shared region's exported fd, kept to offer it again after a reconnect.
    pub export: Option<OwnedFd>,
}

impl Region {
    /// The name for logs (ASCII by validation).
    pub fn name_str(&self) -> &str {
        core::str::from_utf8(&self.name).unwrap_or("?")
    }
}

/// See the module docs.
pub struct Regions(Vec<Region>);

impl Regions {
    /// No region.
    pub const fn new() -> Regions {
        Regions(Vec::new())
    }

    pub fn insert(&mut self, r: Region) {
        self.0.push(r);
    }

    /// Removes the region that starts at `base`.
    pub fn remove(&mut self, base: CUdeviceptr) -> Option<Region> {
        let i = self.0.iter().position(|r| r.base == base)?;
        Some(self.0.swap_remove(i))
    }

    /// Whether `addr` lies in a region (its start or inside).
    pub fn contains(&self, addr: CUdeviceptr) -> bool {
        self.0
            .iter()
            .any(|r| addr >= r.base && addr - r.base < r.span)
    }

    /// Whether there is no region.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Sets the `offered` state of the shared region at `base`; `false` when
    /// there is no shared region there (any more).
    pub fn set_offered(&mut self, base: CUdeviceptr, offered: bool) -> bool {
        match self
            .0
            .iter_mut()
            .find(|r| r.base == base)
            .map(|r| &mut r.role)
        {
            Some(Role::Shared { offered: o }) => {
                *o = offered;
                true
            }
            _ => false,
        }
    }

    /// tandemd refused to share the region at `base` under `name` (taken,
    /// over a limit, not permitted): it drops that name, so no later tandemd
    /// is offered it unasked and the program may offer it under another.
    /// Nothing if no shared region there holds that name (any more).
    pub fn refused(&mut self, base: CUdeviceptr, name: &[u8]) {
        if let Some(r) = self.shared_at(base).filter(|r| r.name == name) {
            r.name.clear();
            r.role = Role::Shared { offered: false };
        }
    }

    /// Closes every exported fd (a fork child's copies: dropping an OwnedFd
    /// is one close(2), and nothing is freed).
    pub fn drop_exports(&mut self) {
        for r in &mut self.0 {
            drop(r.export.take());
        }
    }

    /// The shared (allocated here) region that starts at `base`.
    pub fn shared_at(&mut self, base: CUdeviceptr) -> Option<&mut Region> {
        self.0
            .iter_mut()
            .find(|r| r.base == base && matches!(r.role, Role::Shared { .. }))
    }

    /// Every region this process shares.
    pub fn shared(&self) -> impl Iterator<Item = &Region> {
        self.0
            .iter()
            .filter(|r| matches!(r.role, Role::Shared { .. }))
    }

    /// Every region of another job this process maps (read-only).
    pub fn followed(&self) -> impl Iterator<Item = &Region> {
        self.0.iter().filter(|r| r.role == Role::Followed)
    }

    /// Every region with a name (offered, or followed), either role.
    pub fn named(&self) -> impl Iterator<Item = &Region> {
        self.0.iter().filter(|r| !r.name.is_empty())
    }

    /// Every shared region with a name that tandemd has not accepted.
    pub fn unoffered_named(&self) -> impl Iterator<Item = &Region> {
        self.0
            .iter()
            .filter(|r| !r.name.is_empty() && r.role == Role::Shared { offered: false })
    }

    /// Marks every shared region not offered (a new tandemd knows none).
    pub fn unoffer_shared(&mut self) {
        for r in &mut self.0 {
            if let Role::Shared { offered } = &mut r.role {
                *offered = false;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn region(base: u64, span: u64, role: Role, name: &[u8]) -> Region {
        Region {
            base,
            span,
            bytes: span - 1,
            handle: base + 1,
            ctx: 0,
            role,
            name: name.to_vec(),
            layout: [0; 16],
            export: None,
        }
    }

    #[test]
    fn lookups_by_address_name_and_role() {
        let mut t = Regions::new();
        t.insert(region(
            0x1000_0000,
            4 << 20,
            Role::Shared { offered: false },
            b"a",
        ));
        t.insert(region(0x2000_0000, 2 << 20, Role::Followed, b"b"));
        assert!(t.contains(0x1000_0000));
        assert!(t.contains(0x1000_0000 + (4 << 20) - 1));
        assert!(!t.contains(0x1000_0000 + (4 << 20)));
        assert!(!t.contains(0x0fff_ffff));
        assert!(
            t.shared().all(|r| r.name == b"a"),
            "b is followed, not shared"
        );
        assert!(t.set_offered(0x1000_0000, true));
        assert!(
            !t.set_offered(0x2000_0000, true),
            "not a shared one: no effect"
        );
        let roles: Vec<Role> = t.0.iter().map(|r| r.role).collect();
        assert!(roles.contains(&Role::Shared { offered: true }));
        assert!(roles.contains(&Role::Followed));
        assert_eq!(t.shared().count(), 1);
        assert_eq!(
            t.followed().map(|r| r.base).collect::<Vec<_>>(),
            [0x2000_0000]
        );
        t.insert(region(
            0x3000_0000,
            2 << 20,
            Role::Shared { offered: false },
            b"",
        ));
        let mut named: Vec<u64> = t.named().map(|r| r.base).collect();
        named.sort_unstable();
        assert_eq!(
            named,
            [0x1000_0000, 0x2000_0000],
            "an allocation not offered yet has no name"
        );
        assert!(t.remove(0x3000_0000).is_some());
        assert!(t.shared_at(0x1000_0000).is_some());
        assert!(t.shared_at(0x2000_0000).is_none(), "followed");
        assert!(t.shared_at(0x1000_0001).is_none(), "not its start");
        assert_eq!(t.remove(0x1000_0000).map(|r| r.handle), Some(0x1000_0001));
        assert!(t.remove(0x1000_0000).is_none());
        assert!(!t.contains(0x1000_0000));
        assert!(!t.set_offered(0x1000_0000, true), "gone");
        assert!(!t.is_empty());
        assert!(t.remove(0x2000_0000).is_some());
        assert!(t.is_empty());
    }
}
