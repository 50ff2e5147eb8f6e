/* power.c — see power.h. */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "power.h"
#include "clock.h"
#include "../topology/nvml.h"

enum { MAX_PACKAGES = 16 };

struct tfb_power_meter {
    int n;                                  /* RAPL packages */
    char energy[MAX_PACKAGES][PATH_MAX];    /* .../intel-rapl:N/energy_uj */
    double range_uj[MAX_PACKAGES];          /* max_energy_range_uj: where the counter wraps */
    double last_uj[MAX_PACKAGES];
    int n_thr;                              /* one package_throttle_count per package, when readable */
    char throttle[MAX_PACKAGES][PATH_MAX];
    char source[96];
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int running, in_window;
    double total_j;                         /* since open, wraparound corrected, all packages */
    double window_j, mark_j;                /* inside windows; total at the open window's start */
    double last_t, last_total, peak_w;      /* the sampling interval under way */
    int last_sure;                          /* its start was read promptly (see stamped_read) */
    int samples;
    long thr_mark, thr_events;
    tfb_nvml *nvml;                         /* a GPU meter: NVML's board energy counter of GPU `gpu` (else RAPL) */
    int gpu;
    double clock_sum;                       /* GPU: SM clock (MHz) summed over the in-window samples */
    unsigned long long last_mj;
};

static const char *sysfs_root(void) {
    const char *r = getenv("TFB_TEST_SYSFS_DIR");
    return r && r[0] ? r : "/sys";
}

/* One number from a sysfs file; 0 with errno kept when it cannot be read. */
static int read_number(const char *path, double *v) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    int ok = fscanf(f, "%lf", v) == 1;
    int saved = errno;
    fclose(f);
    errno = ok ? 0 : (saved ? saved : EINVAL);
    return ok;
}

/* Adds intel-rapl:N (a package zone, not a subzone such as intel-rapl:0:1) when its counter reads. */
static int add_package(tfb_power_meter *m, const char *dir, const char *zone, char *why, size_t len) {
    char path[PATH_MAX], name[64] = "";
    int idx, end = 0;
    if (sscanf(zone, "intel-rapl:%d%n", &idx, &end) != 1 || zone[end] != '\0' || m->n == MAX_PACKAGES) return 1;
    snprintf(path, sizeof path, "%s/%s/name", dir, zone);
    FILE *f = fopen(path, "r");
    if (f) { if (!fgets(name, sizeof name, f)) name[0] = '\0'; fclose(f); }
    if (strncmp(name, "package", 7) != 0) return 1;
    snprintf(m->energy[m->n], PATH_MAX, "%s/%s/energy_uj", dir, zone);
    snprintf(path, sizeof path, "%s/%s/max_energy_range_uj", dir, zone);
    if (!read_number(m->energy[m->n], &m->last_uj[m->n])) {
        snprintf(why, len, "%s: %s (the RAPL counters are often readable by root only)", m->energy[m->n],
                 strerror(errno));
        return 0;
    }
    if (!read_number(path, &m->range_uj[m->n]) || !(m->range_uj[m->n] > 0)) m->range_uj[m->n] = 0;
    m->n++;
    return 1;
}

static int find_packages(tfb_power_meter *m, char *why, size_t len) {
    char dir[PATH_MAX / 2];
    snprintf(dir, sizeof dir, "%s/class/powercap", sysfs_root());
    DIR *d = opendir(dir);
    if (!d) { snprintf(why, len, "no RAPL energy counters (%s: %s)", dir, strerror(errno)); return 0; }
    int ok = 1;
    for (struct dirent *e; ok && (e = readdir(d));) ok = add_package(m, dir, e->d_name, why, len);
    closedir(d);
    if (ok && m->n == 0) snprintf(why, len, "no RAPL package zone under %s", dir);
    return ok && m->n > 0;
}

/* One package_throttle_count per physical package (the counter is per package, repeated on each of its CPUs). */
static void find_throttle(tfb_power_meter *m) {
    double seen[MAX_PACKAGES] = {0};
    for (int cpu = 0; cpu < 4096 && m->n_thr < MAX_PACKAGES; cpu++) {
        char path[PATH_MAX], id_path[PATH_MAX];
        double id, v;
        snprintf(path, sizeof path, "%s/devices/system/cpu/cpu%d/thermal_throttle/package_throttle_count",
                 sysfs_root(), cpu);
        snprintf(id_path, sizeof id_path, "%s/devices/system/cpu/cpu%d/topology/physical_package_id", sysfs_root(), cpu);
        if (!read_number(path, &v)) {
            if (cpu > 0 && errno == ENOENT) break;
            continue;
        }
        if (!read_number(id_path, &id)) id = 0;
        int dup = 0;
        for (int i = 0; i < m->n_thr; i++) dup |= seen[i] == id;
        if (!dup) { seen[m->n_thr] = id; snprintf(m->throttle[m->n_thr++], PATH_MAX, "%s", path); }
    }
}

tfb_power_meter *tfb_power_open(char *why, size_t len) {
    tfb_power_meter *m = calloc(1, sizeof *m);
    if (!m) { snprintf(why, len, "out of memory"); return NULL; }
    if (!find_packages(m, why, len)) { free(m); return NULL; }
    find_throttle(m);
    snprintf(m->source, sizeof m->source, "RAPL package energy, %d package%s per node (whole sockets)", m->n,
             m->n > 1 ? "s" : "");
    pthread_mutex_init(&m->mu, NULL);
    pthread_cond_init(&m->cv, NULL);
    return m;
}

/* A meter over one GPU's board energy counter (NVML, millijoules since the driver loaded; Volta and newer). */
tfb_power_meter *tfb_power_open_gpu(unsigned domain, unsigned bus, unsigned dev, char *why, size_t len) {
    tfb_power_meter *m = calloc(1, sizeof *m);
    if (!m) { snprintf(why, len, "out of memory"); return NULL; }
    m->gpu = -1;
    m->nvml = tfb_nvml_open(why, len);
    for (int i = 0; i < tfb_nvml_count(m->nvml); i++) {
        const tfb_nvml_gpu *g = tfb_nvml_gpu_info(m->nvml, i);
        if (g->domain == domain && g->bus == bus && g->dev == dev) m->gpu = i;
    }
    if (m->nvml && m->gpu < 0) snprintf(why, len, "NVML does not list the GPU at %04x:%02x:%02x.0", domain, bus, dev);
    if (m->gpu >= 0 && !(m->last_mj = tfb_nvml_energy_mj(m->nvml, m->gpu)))
        snprintf(why, len, "the GPU at %04x:%02x:%02x.0 has no energy counter (NVML needs Volta or newer)", domain, bus,
                 dev);
    if (!m->last_mj) { tfb_nvml_close(m->nvml); free(m); return NULL; }
    m->n_thr = 1;
    snprintf(m->source, sizeof m->source, "NVML board energy, GPU %04x:%02x:%02x.0 (%.40s)", domain, bus, dev,
             tfb_nvml_gpu_info(m->nvml, m->gpu)->name);
    pthread_mutex_init(&m->mu, NULL);
    pthread_cond_init(&m->cv, NULL);
    return m;
}

static void gpu_counter_read(tfb_power_meter *m) {
    unsigned long long mj = tfb_nvml_energy_mj(m->nvml, m->gpu);
    if (mj > m->last_mj) m->total_j += (double)(mj - m->last_mj) / 1e3;
    if (mj) m->last_mj = mj;
}

/* GPU meters count the sampling intervals inside windows whose clocks a slowing reason held back. */
static void gpu_throttle_sample(tfb_power_meter *m) {
    char text[160];
    tfb_nvml_refresh(m->nvml, m->gpu);
    m->clock_sum += tfb_nvml_gpu_info(m->nvml, m->gpu)->sm_mhz;
    if (tfb_nvml_throttle_text(tfb_nvml_gpu_info(m->nvml, m->gpu)->throttle, text, sizeof text)[0]) m->thr_events++;
}

/* Reads every counter and adds the increments (a counter below its last value wrapped at its range). */
static void counters_read(tfb_power_meter *m) {
    if (m->nvml) { gpu_counter_read(m); return; }
    for (int i = 0; i < m->n; i++) {
        double v;
        if (!read_number(m->energy[i], &v)) continue;
        double d = v - m->last_uj[i];
        if (d < 0) d += m->range_uj[i];
        if (d > 0) m->total_j += d / 1e6;
        m->last_uj[i] = v;
    }
}

static long throttle_sum(const tfb_power_meter *m) {
    long s = 0;
    if (m->nvml) return 0; /* counted per sample instead */
    for (int i = 0; i < m->n_thr; i++) {
        double v;
        if (read_number(m->throttle[i], &v)) s += (long)v;
    }
    return s;
}

/* Reads the counters and stamps the reading with the middle of the read. A read that took long (the thread was
 * descheduled in it) has an uncertain time: its intervals still count towards the energy but not the peak. */
enum { READ_SLACK_MS = 20 };
/* The shortest sampling interval that counts as one (for the peak and the interval count): the sampler wakes once a
 * second, but a window starts at any point of its wait. */
static const double PEAK_MIN_S = 0.5;
static double stamped_read(tfb_power_meter *m, int *sure) {
    double t0 = tfb_clock_s();
    counters_read(m);
    double t1 = tfb_clock_s();
    *sure = t1 - t0 < READ_SLACK_MS * 1e-3;
    return 0.5 * (t0 + t1);
}

static void *sampler(void *arg) {
    tfb_power_meter *m = arg;
    pthread_mutex_lock(&m->mu);
    while (m->running) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += 1;
        pthread_cond_timedwait(&m->cv, &m->mu, &until);
        if (!m->running) break;
        int sure;
        double now = stamped_read(m, &sure);
        if (m->in_window && now > m->last_t) {
            double dt = now - m->last_t, w = (m->total_j - m->last_total) / dt;
            if (dt >= PEAK_MIN_S) { /* a window's first interval can be short: it would magnify the counters' lag */
                if (sure && m->last_sure && w > m->peak_w) m->peak_w = w;
                m->samples++;
            }
            if (m->nvml) gpu_throttle_sample(m);
        }
        m->last_t = now, m->last_total = m->total_j, m->last_sure = sure;
    }
    pthread_mutex_unlock(&m->mu);
    return NULL;
}

void tfb_power_start(tfb_power_meter *m) {
    if (!m) return;
    pthread_mutex_lock(&m->mu);
    counters_read(m);
    m->running = 1;
    pthread_mutex_unlock(&m->mu);
    if (pthread_create(&m->thread, NULL, sampler, m) != 0) m->running = 0;
}

void tfb_power_window_begin(tfb_power_meter *m) {
    if (!m) return;
    pthread_mutex_lock(&m->mu);
    m->last_t = stamped_read(m, &m->last_sure);
    m->mark_j = m->last_total = m->total_j;
    m->in_window = 1;
    m->thr_mark = throttle_sum(m);
    pthread_mutex_unlock(&m->mu);
}

void tfb_power_window_end(tfb_power_meter *m) {
    if (!m) return;
    pthread_mutex_lock(&m->mu);
    counters_read(m);
    m->window_j += m->total_j - m->mark_j;
    m->in_window = 0;
    m->thr_events += throttle_sum(m) - m->thr_mark;
    pthread_mutex_unlock(&m->mu);
}

void tfb_power_stop(tfb_power_meter *m, double *joules, double *peak_w, int *samples, long *throttled) {
    if (!m) return;
    pthread_mutex_lock(&m->mu);
    int was = m->running;
    m->running = 0;
    pthread_cond_signal(&m->cv);
    pthread_mutex_unlock(&m->mu);
    if (was) pthread_join(m->thread, NULL);
    *joules = m->window_j;
    *peak_w = m->peak_w;
    *samples = m->samples;
    *throttled = m->n_thr ? m->thr_events : -1;
}

const char *tfb_power_source(const tfb_power_meter *m) { return m ? m->source : "none"; }

double tfb_power_mean_clock_mhz(const tfb_power_meter *m) {
    return m && m->nvml && m->samples > 0 ? m->clock_sum / m->samples : 0;
}

void tfb_power_close(tfb_power_meter *m) {
    if (!m) return;
    tfb_nvml_close(m->nvml);
    pthread_mutex_destroy(&m->mu);
    pthread_cond_destroy(&m->cv);
    free(m);
}
