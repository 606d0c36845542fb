/* A persistent pool of worker threads that sleep between jobs (kernels/_cpu).
 *
 * Why: a decode step makes about 120 matmul calls of 10-200 us each; starting POSIX threads
 * per call costs more than a short call gains, and OpenMP-style spinning threads collapse when
 * another process wants the core (docs/engine.md, "On CPU"). Here the workers are started once
 * and wait on a condition variable; a job wakes them with one broadcast. After a job a worker
 * polls for the next one for `laser_pool_set_spin` microseconds only (default 0: straight to
 * sleep; the engine sets 25, EngineConfig.pool_spin_us): a decode step's calls follow each other
 * microseconds apart, and a sleeping worker takes longer to wake than a one-stream call lasts.
 *
 * A job is `ntasks` calls of fn(arg, task); the caller runs tasks too, and any worker that is
 * awake claims the next task index with one compare-and-swap on (job generation, next task):
 * a worker that lost its core to another process never holds up tasks it has not claimed, so a
 * busy machine degrades to the caller doing the work, not to the caller waiting.
 *
 * Every task runs with denormals flushed to zero (MXCSR's FTZ and DAZ: set once in each worker,
 * and in the caller for the call's length). Intel cores take a microcode assist, about a
 * hundred cycles, for each vector instruction whose result or input is denormal: the SiLU's
 * vectorised clamp computes x / (1 + e^88) in lanes it then discards, 1e-38 and below, and ran
 * 4.6x slower for it on an Ice Lake Xeon (a tenth of a 64-row decode step; AMD's cores take no
 * such assist). No value the kernels keep is that small: the weights' and activations' scales
 * are float16 or larger, and a softmax weight under 1e-38 is zero to every sum it enters.
 */
#define _GNU_SOURCE
#include "laser_cpu.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <time.h>
#if defined(__x86_64__)
#include <immintrin.h>
#define CPU_RELAX() _mm_pause()
enum { FLUSH_DENORMALS = 0x8040 }; /* MXCSR's flush-to-zero and denormals-are-zero bits */
static unsigned fp_enter(void) {
    unsigned saved = _mm_getcsr();
    if ((saved & FLUSH_DENORMALS) != FLUSH_DENORMALS) _mm_setcsr(saved | FLUSH_DENORMALS);
    return saved;
}
static void fp_leave(unsigned saved) {
    if ((saved & FLUSH_DENORMALS) != FLUSH_DENORMALS) _mm_setcsr(saved);
}
#else
#define CPU_RELAX() ((void)0)
static unsigned fp_enter(void) { return 0; }
static void fp_leave(unsigned saved) { (void)saved; }
#endif

enum { POOL_MAX = 64, POOL_SLOTS = 4 };

typedef struct {
    laser_task_fn fn;
    void *arg;
    int64_t ntasks;
    int workers; /* workers (besides the caller) that may take part */
} pool_job;

static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t ids[POOL_MAX];
    int started;     /* worker threads running */
    int quit;
    _Atomic uint64_t state; /* generation << 32 | next task */
    _Atomic int64_t done;   /* tasks of the current job finished */
    pool_job jobs[POOL_SLOTS]; /* job of generation g in slot g % POOL_SLOTS */
    _Atomic int spin_us;
} pool = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

static pthread_mutex_t start_mu = PTHREAD_MUTEX_INITIALIZER;

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

/* claim and run tasks of generation gen until none is left; returns how many ran */
static int64_t run_tasks(uint32_t gen, const pool_job *job) {
    int64_t ran = 0;
    uint64_t s = atomic_load_explicit(&pool.state, memory_order_acquire);
    for (;;) {
        if ((uint32_t)(s >> 32) != gen || (int64_t)(s & 0xffffffffu) >= job->ntasks) break;
        if (!atomic_compare_exchange_weak_explicit(&pool.state, &s, s + 1, memory_order_acq_rel,
                                                   memory_order_acquire))
            continue;
        job->fn(job->arg, (int64_t)(s & 0xffffffffu));
        ran++;
        s = atomic_load_explicit(&pool.state, memory_order_acquire);
    }
    if (ran) atomic_fetch_add_explicit(&pool.done, ran, memory_order_acq_rel);
    return ran;
}

static void *worker(void *arg) {
    int index = (int)(intptr_t)arg;
    fp_enter(); /* for the thread's life: it runs nothing but tasks */
    uint32_t seen = (uint32_t)(atomic_load(&pool.state) >> 32);
    for (;;) {
        uint32_t gen = (uint32_t)(atomic_load_explicit(&pool.state, memory_order_acquire) >> 32);
        if (gen == seen) {
            int spin = atomic_load_explicit(&pool.spin_us, memory_order_relaxed);
            if (spin > 0) {
                double until = now_us() + spin;
                while (gen == seen && now_us() < until) {
                    for (int i = 0; i < 64; i++) CPU_RELAX();
                    gen = (uint32_t)(atomic_load_explicit(&pool.state, memory_order_acquire) >> 32);
                }
            }
        }
        if (gen == seen) {
            pthread_mutex_lock(&pool.mu);
            while (!pool.quit &&
                   (gen = (uint32_t)(atomic_load(&pool.state) >> 32)) == seen)
                pthread_cond_wait(&pool.cv, &pool.mu);
            int quit = pool.quit;
            pthread_mutex_unlock(&pool.mu);
            if (quit) return NULL;
        }
        seen = gen;
        const pool_job *job = &pool.jobs[gen % POOL_SLOTS];
        if (index < job->workers) run_tasks(gen, job);
    }
}

int laser_pool_size(void) { return pool.started + 1; }

void laser_pool_set_spin(int microseconds) { atomic_store(&pool.spin_us, microseconds); }

int laser_pool_spin(void) { return atomic_load(&pool.spin_us); }

static pthread_mutex_t run_mu = PTHREAD_MUTEX_INITIALIZER; /* one job at a time */

/* a forked child (a prefork server's worker) has none of the parent's threads: start afresh */
static void after_fork_in_child(void) {
    pool.started = 0;
    pthread_mutex_init(&pool.mu, NULL);
    pthread_cond_init(&pool.cv, NULL);
    pthread_mutex_init(&start_mu, NULL);
    pthread_mutex_init(&run_mu, NULL);
}

/* make sure `threads` - 1 workers exist (never fewer than before; at most POOL_MAX) */
void laser_pool_reserve(int threads) {
    static int registered;
    if (threads - 1 <= pool.started) return;
    pthread_mutex_lock(&start_mu);
    if (!registered) {
        pthread_atfork(NULL, NULL, after_fork_in_child);
        registered = 1;
    }
    if (threads > POOL_MAX) threads = POOL_MAX;
    while (pool.started < threads - 1) {
        if (pthread_create(&pool.ids[pool.started], NULL, worker,
                           (void *)(intptr_t)pool.started) != 0)
            break;
        pool.started++;
    }
    pthread_mutex_unlock(&start_mu);
}

/* run fn(arg, 0 .. ntasks - 1) over the caller and up to threads - 1 workers; returns when
 * every task has finished */
void laser_pool_run(laser_task_fn fn, void *arg, int64_t ntasks, int threads) {
    if (ntasks <= 0) return;
    if (threads > ntasks) threads = (int)ntasks;
    if (threads > 1) laser_pool_reserve(threads);
    unsigned saved = fp_enter();
    if (threads <= 1 || pool.started == 0) {
        for (int64_t t = 0; t < ntasks; t++) fn(arg, t);
        fp_leave(saved);
        return;
    }
    pthread_mutex_lock(&run_mu);
    uint32_t gen = (uint32_t)(atomic_load(&pool.state) >> 32) + 1;
    pool_job *job = &pool.jobs[gen % POOL_SLOTS];
    *job = (pool_job){fn, arg, ntasks, threads - 1};
    atomic_store_explicit(&pool.done, 0, memory_order_relaxed);
    atomic_store_explicit(&pool.state, (uint64_t)gen << 32, memory_order_release);
    pthread_mutex_lock(&pool.mu);
    pthread_cond_broadcast(&pool.cv);
    pthread_mutex_unlock(&pool.mu);
    run_tasks(gen, job);
    for (int i = 0; atomic_load_explicit(&pool.done, memory_order_acquire) < ntasks; i++) {
        if (i < 4096)
            CPU_RELAX();
        else
            sched_yield(); /* a worker holding a task lost its core: let it run */
    }
    pthread_mutex_unlock(&run_mu);
    fp_leave(saved);
}
