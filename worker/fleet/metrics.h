/* metrics.h - a small thread-safe metrics registry rendered as Prometheus text (0.0.4).
 *
 * Design: a registry holds metric families (counter, gauge, histogram) in registration
 * order; a family holds series, one per label set (label names fixed per family, values
 * given per series, created on first use).  Histograms have fixed upper bounds given at
 * registration (ascending, +Inf implied).  One mutex guards the whole registry: every
 * update is O(labels + buckets) under it, and v4m_render copies the text out under it,
 * so a scrape never sees a half-updated histogram and never holds the lock during I/O.
 * Names are used verbatim (callers pass valid names such as "v4fleet:ready"); label
 * values are escaped (\\, \", \n) and HELP text (\\, \n) when rendered.  Numbers are
 * printed as integers when integral (below 1e15), else in the shortest form that reads
 * back exactly ("3", "160000", "0.25", "1e+21", "+Inf").
 *
 * Ownership: the registry owns its families, series and copies of all strings; family
 * and series pointers stay valid until v4m_free.  v4m_render returns a malloc'd string.
 * Thread: every function may be called from any thread concurrently, except v4m_free
 * (once, after all other users stopped).  Allocation failures make the update a no-op
 * (a series that cannot be created is not counted) and v4m_render return NULL.
 */
#ifndef V4_METRICS_H
#define V4_METRICS_H

#include <stddef.h>

typedef struct v4m_registry v4m_registry;
typedef struct v4m_family v4m_family;
typedef struct v4m_series v4m_series;

typedef enum v4m_type { V4M_COUNTER, V4M_GAUGE, V4M_HISTOGRAM } v4m_type;

#define V4M_MAX_LABELS 4
#define V4M_MAX_BUCKETS 32

v4m_registry *v4m_new(void);
void v4m_free(v4m_registry *r);

/* Register a family.  labels: NULL-terminated label names (NULL = none, at most
 * V4M_MAX_LABELS).  bounds/n_bounds: histogram upper bounds (ascending, finite, at most
 * V4M_MAX_BUCKETS; ignored for other types).  Returns NULL on bad arguments or no memory. */
v4m_family *v4m_family_new(v4m_registry *r, v4m_type type, const char *name, const char *help,
                           const char *const *labels, const double *bounds, int n_bounds);

/* The series of a family for these label values (as many as the family has label
 * names; NULL for a family without labels); created (value 0) when missing. */
v4m_series *v4m_series_of(v4m_family *f, const char *const *values);

/* Counter/gauge: add v (counters ignore v < 0).  Gauge (and counter whose value comes
 * from elsewhere, e.g. a monotonic total read at scrape time): set.  Histogram: observe. */
void v4m_add(v4m_series *s, double v);
void v4m_set(v4m_series *s, double v);
void v4m_observe(v4m_series *s, double v);
/* Shorthands for families without labels (the single series). */
void v4m_fadd(v4m_family *f, double v);
void v4m_fset(v4m_family *f, double v);
void v4m_fobserve(v4m_family *f, double v);
/* Current value (counter/gauge) or count (histogram), for tests. */
double v4m_value(v4m_series *s);

/* The registry as Prometheus text format 0.0.4 (HELP + TYPE for every family, then its
 * series in creation order).  *len (may be NULL) gets the length.  NULL if no memory. */
char *v4m_render(v4m_registry *r, size_t *len);

/* Shortest decimal text of v that parses back to v ("+Inf", "-Inf", "NaN" too). */
void v4m_format_double(double v, char *out, size_t n);

#endif
