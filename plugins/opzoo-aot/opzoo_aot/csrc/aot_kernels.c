/* CPU kernels of the AOT residual (opzoo-aot), in float32 and float64.
 * Built on first use by opzoo_aot/cpu_kernels.py with the system C compiler; see the
 * implementation in aot_kernels_impl.h. */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#define CHUNK 8192 /* elements of one stream per parallel task */
#define BLOCK 512  /* elements per inner block (a few KiB per stream, stays in L1) */
#define NMAX 16    /* the largest number of streams */

int aot_kernels_nmax(void) { return NMAX; }

#define real float
#define NAME(x) x##_f32
#define EXP expf
#define LOG logf
#include "aot_kernels_impl.h"
#undef real
#undef NAME
#undef EXP
#undef LOG

#define real double
#define NAME(x) x##_f64
#define EXP exp
#define LOG log
#include "aot_kernels_impl.h"
#undef real
#undef NAME
#undef EXP
#undef LOG
