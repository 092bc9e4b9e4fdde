/*
 * forked: the parent runs the workload, fork()s; the child runs it again and
 * leaves with exit() (not _exit(), so atexit handlers and destructors, the
 * shim's exit-time `counts` line included, run in the child); the parent
 * waits, checks the child's status and runs the workload once more.
 *
 *   forked [linked|dlopen|gpa]      (default linked; gpa = cuGetProcAddress_v2, 12000, flags 0)
 *
 * How counts are compared across fork():
 *  - The fake driver's counters live in the process's memory, so the child
 *    starts with a copy of the parent's values (unless the fake resets them
 *    in an atfork handler; nothing in the contract says either way). The
 *    child therefore never compares fake counters absolutely: it snapshots
 *    them right after fork() and compares differences from there.
 *  - The host's own per-slot counters are copied the same way; differences
 *    again.
 *  - The shim's counts must restart at zero in the child (contract). The
 *    child checks that every hook count is 0 right after fork() (while the
 *    parent's were not: the parent prints PRE_FORK_HOOKS to show the check
 *    means something), and then that hook count == fake difference since
 *    fork == own difference since fork for every hooked symbol.
 *  - The parent is unaffected by the child: after the child has finished it
 *    compares absolutely, from its own start, over both of its runs
 *    (2 * 15 kernels).
 */
#include "resolve.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static int run_once(struct drv *d, const char *role)
{
    uint64_t sum = 0;
    int rc = wl_run(d, 1, &sum);
    if (rc)
        return rc;
    printf("RESULT %016" PRIx64 " %s\n", sum, role);
    fflush(stdout);
    return 0;
}

int main(int argc, char **argv)
{
    struct wl_snap start;
    struct drv d;
    struct gpa g;
    const char *path = argc > 1 ? argv[1] : "linked";
    int bad = 0, rc;

    wl_snap_take(&start);
    bad += wl_check_zero_hooks("start", &start);
    wl_drv_init(&d, path);
    if (strcmp(path, "linked") == 0) {
        resolve_linked(&d, 0);
    } else if (strcmp(path, "dlopen") == 0) {
        if ((rc = resolve_dlopen(&d)))
            return rc;
    } else if (strcmp(path, "gpa") == 0) {
        if ((rc = resolve_gpa_entry(&g, 1)))
            return rc;
        if (resolve_gpa(&d, &g, 12000, 0, 0) != 0)
            return WL_EXIT_CHECK;
    } else {
        fprintf(stderr, "usage: forked [linked|dlopen|gpa]\n");
        return WL_EXIT_USAGE;
    }
    if (wl_preinit_check(&d))
        return WL_EXIT_CUDA;
    if ((rc = run_once(&d, "parent-1")))
        return rc;
    bad += wl_check("parent-1", &start, &start, WL_KERNELS_PER_RUN);
    if (wl_have_shim())
        printf("PRE_FORK_HOOKS cuLaunchKernel=%" PRIu64 "\n", wl_hook_count("cuLaunchKernel"));
    printf("PID parent %d\n", (int)getpid());
    fflush(stdout);
    fflush(stderr);

    pid_t pid = fork();
    if (pid < 0) {
        perror("fork");
        return WL_EXIT_CHECK;
    }
    if (pid == 0) {
        struct wl_snap at_fork, base;
        int cbad = 0;
        printf("PID child %d\n", (int)getpid());
        wl_snap_take(&at_fork);
        cbad += wl_check_zero_hooks("child-restart", &at_fork);
        /* hook counts restart at 0; fake counters continue from the copy. */
        wl_snap_take(&base);
        memcpy(base.fake, at_fork.fake, wl_nsyms() * sizeof(uint64_t));
        for (size_t i = 0; i < wl_nsyms(); i++)
            base.hook[i] = at_fork.hook[i] == UINT64_MAX ? UINT64_MAX : 0;
        if ((rc = run_once(&d, "child")))
            exit(rc);
        cbad += wl_check("child", &at_fork, &base, WL_KERNELS_PER_RUN);
        printf("DONE child mismatches=%d\n", cbad);
        fflush(stdout);
        exit(cbad ? WL_EXIT_CHECK : WL_EXIT_OK);
    }

    int status = 0;
    if (waitpid(pid, &status, 0) != pid) {
        perror("waitpid");
        return WL_EXIT_CHECK;
    }
    int child_ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    printf("CHILD exited=%d code=%d signaled=%d\n", WIFEXITED(status),
           WIFEXITED(status) ? WEXITSTATUS(status) : -1,
           WIFSIGNALED(status) ? WTERMSIG(status) : 0);
    if (!child_ok) {
        printf("MISMATCH parent child-failed\n");
        bad++;
    }
    if ((rc = run_once(&d, "parent-2")))
        return rc;
    bad += wl_check("parent-2", &start, &start, 2 * WL_KERNELS_PER_RUN);
    printf("DONE mismatches=%d\n", bad);
    return bad ? WL_EXIT_CHECK : WL_EXIT_OK;
}
