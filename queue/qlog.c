/* qlog.c - the AMQP service's log line and clock (see service_internal.h).  A leaf: the
 * files of the service (service.c, consumer.c, publisher.c, reconnect.c) all log and
 * read the clock, and none of them is called back from here.
 * Thread: any (v4q_logf calls the owner's log callback, which must be thread-safe).
 */
#include <stdarg.h>
#include <stdio.h>
#include <time.h>

#include "service_internal.h"

void v4q_logf(v4q_service *s, int level, const char *fmt, ...)
{
    if (!s->log || level > s->cfg.log_level)
        return;
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    s->log(s->log_ud, level, line);
}

double v4q_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}
