/* weights.c - release what a v4_weights owns (see weights.h). */
#include <stdlib.h>

#include "weights.h"

void v4_weights_free(v4_weights *w)
{
    if (!w)
        return;
    for (int i = 0; i < w->n_owned; i++)
        free(w->owned[i]);
    free(w->owned);
    if (w->layers)
        for (int l = 0; l < w->cfg.n_layers; l++)
            free(w->layers[l].experts);
    free(w->layers);
    w->owned = NULL;
    w->layers = NULL;
    w->n_owned = w->cap_owned = 0;
}
