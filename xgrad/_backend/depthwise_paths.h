/* depthwise_body.h compiled once per CPU path (SSE2, and AVX2 and AVX-512
 * where cpu_paths.h has per-path builds) for the element type the includer
 * defines as DW_T (with DW_SFX and DW_LANES). Included by depthwise.h only. */
#define DW_ISA sse2
#define DW_ATTR
#include "depthwise_body.h"
#undef DW_ISA
#undef DW_ATTR
#if XGRAD_HAS_PATHS
#define DW_ISA avx2
#define DW_ATTR __attribute__((target("avx2")))
#include "depthwise_body.h"
#undef DW_ISA
#undef DW_ATTR
#define DW_ISA avx512
#define DW_ATTR __attribute__((target("avx512f")))
#include "depthwise_body.h"
#undef DW_ISA
#undef DW_ATTR
#endif
