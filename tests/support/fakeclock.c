/*
 * fakeclock.so -- LD_PRELOAD shim that makes one process tree believe the
 * machine was suspended for N seconds.
 *
 * On resume from suspend Linux moves CLOCK_REALTIME and CLOCK_BOOTTIME (and
 * the clocks derived from them) forward by the time spent asleep, while
 * CLOCK_MONOTONIC does not move.  This shim reproduces exactly that for the
 * process it is preloaded into (and, through the inherited environment, for
 * its children):
 *
 *   shifted:   CLOCK_REALTIME, CLOCK_REALTIME_COARSE, CLOCK_REALTIME_ALARM,
 *              CLOCK_BOOTTIME, CLOCK_BOOTTIME_ALARM, CLOCK_TAI,
 *              gettimeofday(), time(), timespec_get(TIME_UTC)
 *   untouched: CLOCK_MONOTONIC(_RAW/_COARSE), CPU-time clocks, dynamic clocks,
 *              and every sleeping/waiting function (they keep using the real
 *              kernel clocks).
 *
 * The offset (seconds, decimal text such as "3600" or "-1.25" or "1e3") is
 * read from the file named by $SLOTH_FAKECLOCK_FILE.  The file is stat()ed at
 * most once per 50 ms of real CLOCK_MONOTONIC time and only re-read when its
 * identity (inode, size, mtime, ctime) changed.  A missing, unreadable or
 * malformed file, or an unset/empty variable, means offset 0.  Writers should
 * replace the file atomically (write a temporary file, then rename()).
 * The variable is read once, on first use; changing it later has no effect.
 *
 * Build: cc -shared -fPIC -O2 -o fakeclock.so fakeclock.c -ldl
 *
 * Implementation notes:
 *  - The real functions are found with dlsym(RTLD_NEXT, ...).  Calls made
 *    inside glibc (e.g. glibc's own time() reading the vDSO) do not go through
 *    the PLT, which is why time()/gettimeofday()/timespec_get() are wrapped
 *    separately rather than relying on clock_gettime() alone.
 *  - The shim never calls an interposed function itself: the 50 ms throttle
 *    uses the real clock_gettime(CLOCK_MONOTONIC).
 *  - Lock-free: the offset is an atomic int64 of nanoseconds; a refresh is
 *    guarded by an atomic try-flag (reset in fork children), so concurrent
 *    callers and signal handlers never block -- they use the cached value.
 *  - errno is preserved across the stat()/open()/read() of a refresh.
 *  - x86_64/aarch64 glibc have no separate 64-bit-time symbols
 *    (__clock_gettime64 exists only on 32-bit targets), so none are wrapped.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define FAKECLOCK_ENV "SLOTH_FAKECLOCK_FILE"
#define NSEC_PER_SEC 1000000000LL
#define REFRESH_NS (50LL * 1000 * 1000)
#define PATH_BUF 4096

/* Linux clock ids that may be missing from older headers. */
#ifndef CLOCK_REALTIME_COARSE
#define CLOCK_REALTIME_COARSE 5
#endif
#ifndef CLOCK_BOOTTIME
#define CLOCK_BOOTTIME 7
#endif
#ifndef CLOCK_REALTIME_ALARM
#define CLOCK_REALTIME_ALARM 8
#endif
#ifndef CLOCK_BOOTTIME_ALARM
#define CLOCK_BOOTTIME_ALARM 9
#endif
#ifndef CLOCK_TAI
#define CLOCK_TAI 11
#endif

/* gettimeofday's second parameter became `void *` in glibc 2.31. */
#if defined(__GLIBC__) && !defined(__UCLIBC__) && \
    (__GLIBC__ < 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ < 31))
typedef struct timezone *fc_tz_ptr;
#else
typedef void *fc_tz_ptr;
#endif

#define EXPORT __attribute__((visibility("default")))

typedef int (*clock_gettime_fn)(clockid_t, struct timespec *);
typedef int (*gettimeofday_fn)(struct timeval *, fc_tz_ptr);
typedef time_t (*time_fn)(time_t *);
typedef int (*timespec_get_fn)(struct timespec *, int);

static _Atomic(clock_gettime_fn) real_clock_gettime_p;
static _Atomic(gettimeofday_fn) real_gettimeofday_p;
static _Atomic(time_fn) real_time_p;
static _Atomic(timespec_get_fn) real_timespec_get_p;

/* ------------------------------------------------------------------------ */
/* Real functions                                                           */
/* ------------------------------------------------------------------------ */

static int sys_clock_gettime(clockid_t clk, struct timespec *ts)
{
    return (int)syscall(SYS_clock_gettime, clk, ts);
}

static clock_gettime_fn real_clock_gettime(void)
{
    clock_gettime_fn fn = atomic_load_explicit(&real_clock_gettime_p, memory_order_acquire);
    if (fn == NULL) {
        fn = (clock_gettime_fn)dlsym(RTLD_NEXT, "clock_gettime");
        if (fn == NULL)
            fn = sys_clock_gettime;
        atomic_store_explicit(&real_clock_gettime_p, fn, memory_order_release);
    }
    return fn;
}

static int fallback_gettimeofday(struct timeval *tv, fc_tz_ptr tz)
{
    struct timespec ts;
    if (tz != NULL)
        memset(tz, 0, sizeof(struct timezone));
    if (tv == NULL)
        return 0;
    if (real_clock_gettime()(CLOCK_REALTIME, &ts) != 0)
        return -1;
    tv->tv_sec = ts.tv_sec;
    tv->tv_usec = ts.tv_nsec / 1000;
    return 0;
}

static gettimeofday_fn real_gettimeofday(void)
{
    gettimeofday_fn fn = atomic_load_explicit(&real_gettimeofday_p, memory_order_acquire);
    if (fn == NULL) {
        fn = (gettimeofday_fn)dlsym(RTLD_NEXT, "gettimeofday");
        if (fn == NULL)
            fn = fallback_gettimeofday;
        atomic_store_explicit(&real_gettimeofday_p, fn, memory_order_release);
    }
    return fn;
}

static time_t fallback_time(time_t *t)
{
    struct timespec ts;
    if (real_clock_gettime()(CLOCK_REALTIME, &ts) != 0)
        return (time_t)-1;
    if (t != NULL)
        *t = ts.tv_sec;
    return ts.tv_sec;
}

static time_fn real_time(void)
{
    time_fn fn = atomic_load_explicit(&real_time_p, memory_order_acquire);
    if (fn == NULL) {
        fn = (time_fn)dlsym(RTLD_NEXT, "time");
        if (fn == NULL)
            fn = fallback_time;
        atomic_store_explicit(&real_time_p, fn, memory_order_release);
    }
    return fn;
}

static int fallback_timespec_get(struct timespec *ts, int base)
{
    if (base != TIME_UTC || real_clock_gettime()(CLOCK_REALTIME, ts) != 0)
        return 0;
    return base;
}

static timespec_get_fn real_timespec_get(void)
{
    timespec_get_fn fn = atomic_load_explicit(&real_timespec_get_p, memory_order_acquire);
    if (fn == NULL) {
        fn = (timespec_get_fn)dlsym(RTLD_NEXT, "timespec_get");
        if (fn == NULL)
            fn = fallback_timespec_get;
        atomic_store_explicit(&real_timespec_get_p, fn, memory_order_release);
    }
    return fn;
}

/* ------------------------------------------------------------------------ */
/* Offset state                                                             */
/* ------------------------------------------------------------------------ */

enum { INIT_NONE = 0, INIT_RUNNING = 1, INIT_DONE = 2 };

static _Atomic int g_init_state;
static char g_path[PATH_BUF];  /* written once before g_init_state = DONE */
static int g_enabled;          /* ditto */

static _Atomic int64_t g_offset_ns;
static _Atomic int64_t g_next_check_ns; /* real CLOCK_MONOTONIC, ns */
static _Atomic int g_refreshing;

/* Identity of the file the cached offset came from; only touched by the
 * thread that owns g_refreshing. */
static struct {
    int valid;
    dev_t dev;
    ino_t ino;
    off_t size;
    int64_t mtime_ns;
    int64_t ctime_ns;
} g_ident;

/* Returns 1 when the configuration is known, 0 while another thread (or an
 * interrupted frame of this one) is still reading it. */
static int ensure_init(void)
{
    int expected = INIT_NONE;
    if (atomic_load_explicit(&g_init_state, memory_order_acquire) == INIT_DONE)
        return 1;
    if (!atomic_compare_exchange_strong(&g_init_state, &expected, INIT_RUNNING))
        return 0;
    {
        const char *p = getenv(FAKECLOCK_ENV);
        size_t n = p ? strlen(p) : 0;
        if (n > 0 && n < sizeof(g_path)) {
            memcpy(g_path, p, n + 1);
            g_enabled = 1;
        }
    }
    atomic_store_explicit(&g_init_state, INIT_DONE, memory_order_release);
    return 1;
}

/*
 * Parse "[ws][+-]digits[.digits][(e|E)[+-]digits][ws]" (or ".5", "5.")
 * into nanoseconds, exactly (no floating point, locale independent).
 * Digits beyond nanosecond precision are truncated.  Returns 0 on garbage
 * or overflow.
 */
static int parse_offset_ns(const char *s, size_t len, int64_t *out)
{
    enum { MAX_DIGITS = 64 };
    const char *end = s + len;
    char digits[MAX_DIGITS];
    int ndigits = 0, npoint = 0, seen_digit = 0, negative = 0;
    long exp10 = 0;
    int64_t value = 0;
    long places, k;

    while (s < end && (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r'))
        s++;
    if (s < end && (*s == '+' || *s == '-'))
        negative = (*s++ == '-');

    /* integer part (leading zeros are dropped so they never count) */
    for (; s < end && *s >= '0' && *s <= '9'; s++) {
        seen_digit = 1;
        if (ndigits == 0 && *s == '0')
            continue;
        if (ndigits >= MAX_DIGITS)
            return 0;
        digits[ndigits++] = (char)(*s - '0');
        npoint++;
    }
    if (s < end && *s == '.') {
        s++;
        for (; s < end && *s >= '0' && *s <= '9'; s++) {
            seen_digit = 1;
            if (ndigits == 0 && *s == '0') {
                npoint--; /* 0.00x: shift the decimal point instead */
                continue;
            }
            if (ndigits < MAX_DIGITS)
                digits[ndigits++] = (char)(*s - '0');
            /* further fraction digits are below any useful precision */
        }
    }
    if (!seen_digit)
        return 0;
    if (s < end && (*s == 'e' || *s == 'E')) {
        int eneg = 0, edigit = 0;
        s++;
        if (s < end && (*s == '+' || *s == '-'))
            eneg = (*s++ == '-');
        for (; s < end && *s >= '0' && *s <= '9'; s++) {
            edigit = 1;
            if (exp10 < 100000)
                exp10 = exp10 * 10 + (*s - '0');
        }
        if (!edigit)
            return 0;
        if (eneg)
            exp10 = -exp10;
    }
    while (s < end && (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r'))
        s++;
    if (s != end)
        return 0;

    if (ndigits == 0) {
        *out = 0;
        return 1;
    }
    /* Number of digits left of the nanosecond "decimal point". */
    places = (long)npoint + exp10 + 9;
    if (places > 19)
        return 0; /* >= 1e10 s: would overflow int64 nanoseconds */
    for (k = 0; k < places; k++) {
        int d = k < ndigits ? digits[k] : 0;
        if (value > (INT64_MAX - d) / 10)
            return 0;
        value = value * 10 + d;
    }
    *out = negative ? -value : value;
    return 1;
}

static int64_t read_offset_file(const struct stat *st_path)
{
    char buf[128];
    size_t used = 0;
    struct stat st;
    int64_t value = 0;
    int fd;

    g_ident.valid = 0;
    if (!S_ISREG(st_path->st_mode) || st_path->st_size >= (off_t)sizeof(buf))
        goto remember; /* not a small regular file: garbage */

    fd = open(g_path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd < 0)
        return 0;
    if (fstat(fd, &st) != 0) {
        close(fd);
        return 0;
    }
    st_path = &st;
    while (used < sizeof(buf)) {
        ssize_t n = read(fd, buf + used, sizeof(buf) - used);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        used += (size_t)n;
    }
    close(fd);
    if (used >= sizeof(buf) || !parse_offset_ns(buf, used, &value))
        value = 0;

remember:
    g_ident.valid = 1;
    g_ident.dev = st_path->st_dev;
    g_ident.ino = st_path->st_ino;
    g_ident.size = st_path->st_size;
    g_ident.mtime_ns = (int64_t)st_path->st_mtim.tv_sec * NSEC_PER_SEC + st_path->st_mtim.tv_nsec;
    g_ident.ctime_ns = (int64_t)st_path->st_ctim.tv_sec * NSEC_PER_SEC + st_path->st_ctim.tv_nsec;
    return value;
}

/* Called by the single owner of g_refreshing. */
static void refresh_offset(void)
{
    struct stat st;
    int saved_errno = errno;

    if (stat(g_path, &st) != 0) {
        g_ident.valid = 0;
        atomic_store_explicit(&g_offset_ns, 0, memory_order_release);
    } else if (!(g_ident.valid && g_ident.dev == st.st_dev && g_ident.ino == st.st_ino &&
                 g_ident.size == st.st_size &&
                 g_ident.mtime_ns == (int64_t)st.st_mtim.tv_sec * NSEC_PER_SEC + st.st_mtim.tv_nsec &&
                 g_ident.ctime_ns == (int64_t)st.st_ctim.tv_sec * NSEC_PER_SEC + st.st_ctim.tv_nsec)) {
        atomic_store_explicit(&g_offset_ns, read_offset_file(&st), memory_order_release);
    }
    errno = saved_errno;
}

static int64_t current_offset_ns(void)
{
    struct timespec now;

    if (!ensure_init() || !g_enabled)
        return 0;
    if (real_clock_gettime()(CLOCK_MONOTONIC, &now) == 0) {
        int64_t now_ns = (int64_t)now.tv_sec * NSEC_PER_SEC + now.tv_nsec;
        if (now_ns >= atomic_load_explicit(&g_next_check_ns, memory_order_relaxed)) {
            int expected = 0;
            if (atomic_compare_exchange_strong(&g_refreshing, &expected, 1)) {
                /* Re-check: another thread may have refreshed meanwhile. */
                if (now_ns >= atomic_load_explicit(&g_next_check_ns, memory_order_relaxed)) {
                    refresh_offset();
                    atomic_store_explicit(&g_next_check_ns, now_ns + REFRESH_NS,
                                          memory_order_relaxed);
                }
                atomic_store_explicit(&g_refreshing, 0, memory_order_release);
            }
            /* else: someone is refreshing right now; use the cached value. */
        }
    }
    return atomic_load_explicit(&g_offset_ns, memory_order_acquire);
}

static void after_fork_in_child(void)
{
    /* A thread that does not exist in the child may have owned the flag. */
    atomic_store(&g_refreshing, 0);
}

__attribute__((constructor)) static void fakeclock_init(void)
{
    /* Resolve everything eagerly so later calls (possibly from signal
     * handlers) never need dlsym. */
    real_clock_gettime();
    real_gettimeofday();
    real_time();
    real_timespec_get();
    ensure_init();
    pthread_atfork(NULL, NULL, after_fork_in_child);
}

/* ------------------------------------------------------------------------ */
/* Helpers                                                                  */
/* ------------------------------------------------------------------------ */

static int is_shifted_clock(clockid_t clk)
{
    switch (clk) {
    case CLOCK_REALTIME:
    case CLOCK_REALTIME_COARSE:
    case CLOCK_REALTIME_ALARM:
    case CLOCK_BOOTTIME:
    case CLOCK_BOOTTIME_ALARM:
    case CLOCK_TAI:
        return 1;
    default:
        return 0;
    }
}

/* The headers declare the pointer arguments nonnull, which would let the
 * compiler drop our NULL checks; hide the pointer from that reasoning. */
static inline int not_null(const void *p)
{
    __asm__("" : "+r"(p));
    return p != NULL;
}

static void shift_timespec(struct timespec *ts, int64_t off_ns)
{
    int64_t sec = off_ns / NSEC_PER_SEC;
    int64_t nsec = (int64_t)ts->tv_nsec + off_ns % NSEC_PER_SEC;
    if (nsec >= NSEC_PER_SEC) {
        nsec -= NSEC_PER_SEC;
        sec++;
    } else if (nsec < 0) {
        nsec += NSEC_PER_SEC;
        sec--;
    }
    ts->tv_sec += (time_t)sec;
    ts->tv_nsec = (long)nsec;
}

/* ------------------------------------------------------------------------ */
/* Interposed functions                                                     */
/* ------------------------------------------------------------------------ */

EXPORT int clock_gettime(clockid_t clk, struct timespec *ts)
{
    int rc = real_clock_gettime()(clk, ts);
    if (rc == 0 && not_null(ts) && is_shifted_clock(clk)) {
        int64_t off = current_offset_ns();
        if (off != 0)
            shift_timespec(ts, off);
    }
    return rc;
}

EXPORT int gettimeofday(struct timeval *tv, fc_tz_ptr tz)
{
    int rc = real_gettimeofday()(tv, tz);
    if (rc == 0 && not_null(tv)) {
        int64_t off = current_offset_ns();
        if (off != 0) {
            struct timespec ts;
            ts.tv_sec = tv->tv_sec;
            ts.tv_nsec = (long)tv->tv_usec * 1000;
            shift_timespec(&ts, off);
            tv->tv_sec = ts.tv_sec;
            tv->tv_usec = (suseconds_t)(ts.tv_nsec / 1000);
        }
    }
    return rc;
}

EXPORT time_t time(time_t *t)
{
    int64_t off = current_offset_ns();
    struct timespec ts;

    if (off == 0)
        return real_time()(t);
    /* time() is the coarse (tick-granular) realtime clock, as in the vDSO. */
    if (real_clock_gettime()(CLOCK_REALTIME_COARSE, &ts) != 0 &&
        real_clock_gettime()(CLOCK_REALTIME, &ts) != 0)
        return real_time()(t);
    shift_timespec(&ts, off);
    if (t != NULL)
        *t = ts.tv_sec;
    return ts.tv_sec;
}

EXPORT int timespec_get(struct timespec *ts, int base)
{
    int rc = real_timespec_get()(ts, base);
    if (rc == TIME_UTC && base == TIME_UTC && not_null(ts)) {
        int64_t off = current_offset_ns();
        if (off != 0)
            shift_timespec(ts, off);
    }
    return rc;
}
