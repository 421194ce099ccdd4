/* depthwise_body.h compiled once per CPU path (SSE2, and AVX2 and AVX-512
 * where cpu_paths.h has per-path builds) for the element type the includer
 * defines as DW_T (with DW_SFX and DW_LANES). DW_MANY_REGISTERS: the path
 * has 32 vector registers (dw_stencil's block groups and dw_dot_lanes_3x3's
 * sums stay in them). Included by depthwise.h only. */
#define DW_ISA sse2
#define DW_ATTR
#define DW_MANY_REGISTERS 0
#include "depthwise_body.h"
#undef DW_ISA
#undef DW_ATTR
#undef DW_MANY_REGISTERS
#if XGRAD_HAS_PATHS
#define DW_ISA avx2
#define DW_ATTR __attribute__((target("avx2")))
#define DW_MANY_REGISTERS 0
#include "depthwise_body.h"
#undef DW_ISA
#undef DW_ATTR
#undef DW_MANY_REGISTERS
#define DW_ISA avx512
#define DW_ATTR __attribute__((target("avx512f")))
#define DW_MANY_REGISTERS 1
#include "depthwise_body.h"
#undef DW_ISA
#undef DW_ATTR
#undef DW_MANY_REGISTERS
#endif
