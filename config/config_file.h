/* config_file.h - a settings file of NAME=value lines (the worker's V4_CONFIG_FILE).
 *
 * Format: one setting per line, `NAME=value`; blank lines and lines starting with '#'
 * are ignored; spaces around NAME and value are trimmed; a value may be wrapped in
 * double quotes (kept verbatim inside, no escapes).  NAME must be one of `known`
 * (the same names as the environment variables, plus NAME_FILE forms); a repeated
 * NAME, an unknown NAME, a line without '=' or a line over 4 KiB is an error that
 * names the file and the line.
 *
 * Ownership: on success *names / *values are malloc'd arrays of malloc'd strings
 * (v4_cfgfile_free).  Thread: any.
 */
#ifndef V4_CONFIG_FILE_H
#define V4_CONFIG_FILE_H

#include "error.h"

int v4_cfgfile_load(const char *path, const char *const *known, int n_known, char ***names, char ***values,
                    int *n, v4_error *err);
void v4_cfgfile_free(char **names, char **values, int n);

#endif
