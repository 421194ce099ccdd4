/* How many threads the CPU kernels may use.
 *
 * Built with OpenMP (setup.py adds -fopenmp where the compiler has it), the
 * kernels split large arrays over omp_get_max_threads() threads: the number
 * of cores, or OMP_NUM_THREADS when it is set. Built without it, the same
 * code runs on one thread and this says 1.
 */
#ifndef XGRAD_PARALLEL_H
#define XGRAD_PARALLEL_H

#ifdef _OPENMP
#include <omp.h>
#define XGRAD_HAS_OPENMP 1
static int xgrad_max_threads(void) { return omp_get_max_threads(); }
#else
#define XGRAD_HAS_OPENMP 0
static int xgrad_max_threads(void) { return 1; }
#endif

#endif
