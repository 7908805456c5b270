/* Internal interface of src/train: the training loop (trainer.c and its
 * phases), evaluation (eval.c) and the loss plot (plot.c). The public entry
 * points are in coda_train.h. */
#ifndef CODA_TRAIN_H
#define CODA_TRAIN_H

#include "coda_train.h"
#include "base/internal.h"

/* Draws a line plot of up to two series (NaN skips a point) into an RGB
 * PNG of w x h pixels. */
coda_status coda_plot_png(coda_context ctx, const char *path, int w, int h,
                          const double *x1, const double *y1, int n1,
                          const double *x2, const double *y2, int n2);

#endif
