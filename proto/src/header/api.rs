//! The explicit C API `libtandem.so` exports, as the header declares it.

/// The explicit C API exported by `libtandem.so`: `(declaration, doc comment)`.
/// The generator emits these verbatim in the header's API section.
pub const EXPLICIT_API: &[(&str, &str)] = &[
    (
        "uint64_t tandem_hook_count(const char *symbol);",
        "How many times this process called the hooked driver variant exported under exactly\n\
         this name (e.g. \"cuLaunchKernel_ptsz\"); UINT64_MAX if the shim does not hook it.",
    ),
    (
        "uint64_t tandem_driver_calls(const char *symbol);",
        "Calls libtandem.so itself made to that driver function (not on the program's behalf):\n\
         a hooked variant, or an unhooked function the shim uses for its own work (completion\n\
         marks' cuEventCreate and cuEventRecord, cuCtxSetCurrent, ...); UINT64_MAX if the shim\n\
         neither hooks nor calls it. The driver saw tandem_hook_count(symbol) +\n\
         tandem_driver_calls(symbol) calls of a hooked variant, and the program's own calls\n\
         plus tandem_driver_calls(symbol) of any other.",
    ),
    (
        "uint64_t tandem_kernels_launched(void);",
        "Kernels this process sent to the GPU: successful launches not recorded by stream\n\
         capture, plus every kernel node of every graph launch. Compare with CUPTI.",
    ),
    (
        "uint64_t tandem_records_pushed(void);",
        "Records this process pushed into its coordinator ring since it started (or forked),\n\
         over every registration (a reconnect continues the count).",
    ),
    (
        "uint64_t tandem_records_dropped(void);",
        "Records this process dropped since it started (or forked): ring full, or another thread\n\
         of this process inside its own push for longer than the bounded wait (about 5 ms).\n\
         A push never waits on the coordinator.",
    ),
    (
        "uint64_t tandem_client_id(void);",
        "The coordinator's id for this process; 0 while it is not registered (no coordinator,\n\
         refused, TANDEM_CLASS=off, between a coordinator's death and the reconnect).",
    ),
    (
        "void tandem_request_begin(void);",
        "An inference request begins now (optional: without these calls the coordinator infers\n\
         request boundaries from launch gaps and syncs). Reports one REQUEST_BEGIN record while\n\
         registered; does nothing otherwise. Never waits on the coordinator (at most about\n\
         5 ms for another thread of this process that is inside its own push).",
    ),
    (
        "void tandem_request_end(void);",
        "The current inference request ended (its result is ready). Reports one REQUEST_END\n\
         record while registered; does nothing otherwise. Never waits on the coordinator (at most about\n\
         5 ms for another thread of this process that is inside its own push).",
    ),
    (
        "uint64_t tandem_dedup_shared_bytes(void);",
        "Weight dedup (TANDEM_SHARE_WEIGHTS=on): bytes of this process's device memory that map\n\
         a copy shared read-only with other jobs now.",
    ),
    (
        "uint64_t tandem_dedup_merges(void);",
        "Weight dedup: granules this process merged into a shared copy (after a byte-for-byte\n\
         comparison) since it started.",
    ),
    (
        "uint64_t tandem_dedup_cow_breaks(void);",
        "Weight dedup: shared granules this process got a private copy of again because a\n\
         driver copy or memset wrote into them (copy-on-write).",
    ),
    (
        "uint64_t tandem_dedup_backed_bytes(void);",
        "Weight dedup: bytes of device memory held through dedup-backed (VMM) allocations,\n\
         shared or private, in whole 2 MiB granules.",
    ),
    (
        "int tandem_follow_alloc(uint64_t bytes, unsigned long long *dptr);",
        "Follow mode (TANDEM_FOLLOW=on; see README): allocate `bytes` of device memory in the\n\
         current context (whole 2 MiB granules, read-write, like cuMemAlloc) that can be\n\
         offered to followers. Fill it, then call tandem_follow_offer. TANDEM_FOLLOW_OK and\n\
         *dptr set, or *dptr = 0 and TANDEM_FOLLOW_INVALID / _DRIVER. Works with or without\n\
         a coordinator; free it with tandem_follow_free or cuMemFree.",
    ),
    (
        "int tandem_follow_offer(unsigned long long dptr, const char *name,\n\
                        const uint8_t layout[16]);",
        "Follow mode: offer the region tandem_follow_alloc returned as `name` (1-56 printable\n\
         ASCII characters), with the opaque `layout` tag, to followers of this trust group on\n\
         this GPU. Waits for tandemd's answer for at most 5 s. The memory stays the job's\n\
         whatever the code (OK, or why it is not offered now); a named region is offered\n\
         again by itself to a tandemd the process registers with later (a restart), unless\n\
         tandemd refused it (NAME_TAKEN, LIMIT, NOT_PERMITTED, ...): a refused region keeps\n\
         no name and may be offered again, under any name.",
    ),
    (
        "int tandem_follow_map(const char *name, uint64_t bytes, const uint8_t layout[16],\n\
                      unsigned timeout_ms, unsigned long long *dptr);",
        "Follow mode: map region `name`, shared by another job, read-only into the current\n\
         context. `bytes` and `layout` must equal the sharer's. Reads see the sharer's live\n\
         memory (no snapshot: a read may see a half-applied update); writes by a driver copy\n\
         fail, a kernel that writes faults this process only. Waits up to timeout_ms for the\n\
         region to appear (0: 5000). On TANDEM_FOLLOW_OK *dptr is set, else it is 0.",
    ),
    (
        "int tandem_follow_free(unsigned long long dptr);",
        "Follow mode: release a region from tandem_follow_alloc (no longer offered;\n\
         followers keep what they mapped) or tandem_follow_map. cuMemFree does the same.",
    ),
    (
        "const char *tandem_follow_strerror(int code);",
        "Follow mode: one line of text for a tandem_follow_* return code (static storage).",
    ),
    (
        "uint64_t tandem_follow_shared_bytes(void);",
        "Follow mode: device bytes of the regions this process allocated with\n\
         tandem_follow_alloc (offered or not) and holds now, each rounded up to the\n\
         allocation granularity (2 MiB on current GPUs).",
    ),
    (
        "uint64_t tandem_follow_mapped_bytes(void);",
        "Follow mode: device bytes of other jobs' regions this process maps read-only\n\
         now, rounded up as above.",
    ),
];
