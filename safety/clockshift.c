/* The wall clock of a process, moved by the safety harness while it runs (scenario 10).

   Loaded with LD_PRELOAD into a server (or a worker), it answers every wall-clock call
   (clock_gettime on the real-time clocks, gettimeofday, time) with the kernel's time plus
   an offset in nanoseconds, read on every call from the first 8 bytes of the file named by
   TENURE_CLOCK_SHIFT_FILE. The harness rewrites that file to jump the clock; the file is
   mapped shared, so the next call of every process that loaded it sees the jump. The
   monotonic clocks are left alone: an NTP step or an operator's `date -s` moves only the
   wall clock. Not covered: waits with an absolute wall-clock deadline (a condition
   variable on its default clock, sem_timedwait, clock_nanosleep with TIMER_ABSTIME) are
   computed on the moved clock but waited out by the kernel on the true one, so after a
   forward jump they wait longer where a real step would end them early; and timespec_get
   and ftime, which go around it.

   Why not libfaketime: redis-server allocates with jemalloc, which reads the clock while
   libfaketime is still resolving its symbols (dlsym -> calloc -> jemalloc -> clock_gettime),
   and that recursion makes libfaketime fail (its issues #130, #327). This shim resolves
   nothing: it asks the kernel by system call, and before its constructor has mapped the file
   (or when the variable is unset) the offset is zero. */

#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static volatile const int64_t *shift_ns;

__attribute__((constructor)) static void map_shift_file(void) {
    const char *path = getenv("TENURE_CLOCK_SHIFT_FILE");
    if (path == NULL || *path == '\0') return;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    void *page = mmap(NULL, sizeof(int64_t), PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (page != MAP_FAILED) shift_ns = page;
}

static int is_wall_clock(clockid_t clock) {
    return clock == CLOCK_REALTIME || clock == CLOCK_REALTIME_COARSE ||
           clock == CLOCK_REALTIME_ALARM || clock == CLOCK_TAI;
}

static int kernel_clock(clockid_t clock, struct timespec *now) {
    return (int)syscall(SYS_clock_gettime, clock, now);
}

static void shift(struct timespec *now) {
    if (shift_ns == NULL) return;
    int64_t total = (int64_t)now->tv_sec * 1000000000 + now->tv_nsec + *shift_ns;
    now->tv_sec = total / 1000000000;
    now->tv_nsec = total % 1000000000;
    if (now->tv_nsec < 0) {
        now->tv_nsec += 1000000000;
        now->tv_sec -= 1;
    }
}

int clock_gettime(clockid_t clock, struct timespec *now) {
    int answer = kernel_clock(clock, now);
    if (answer == 0 && is_wall_clock(clock)) shift(now);
    return answer;
}

/* glibc's own: both arguments may be NULL, and a zone is zeroed (it is obsolete). */
int gettimeofday(struct timeval *restrict now, void *restrict zone) {
    if (zone != NULL) memset(zone, 0, sizeof(struct timezone));
    struct timeval *volatile out = now; /* glibc declares now nonnull; callers pass NULL */
    if (out == NULL) return 0;
    struct timespec precise;
    int answer = kernel_clock(CLOCK_REALTIME, &precise);
    if (answer != 0) return answer;
    shift(&precise);
    out->tv_sec = precise.tv_sec;
    out->tv_usec = precise.tv_nsec / 1000;
    return 0;
}

time_t time(time_t *out) {
    struct timespec now;
    if (kernel_clock(CLOCK_REALTIME, &now) != 0) return (time_t)-1;
    shift(&now);
    if (out != NULL) *out = now.tv_sec;
    return now.tv_sec;
}
