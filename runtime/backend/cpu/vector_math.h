// NOTE [ Vector math from glibc's libmvec ]
// One scalar erff/expf call per element kept GELU, its gradient, softmax, cross-entropy and the
// other exp-based ops scalar (a tenth of a BERT step). glibc's libmvec has vector forms of both
// (documented at ≤ 2 ulp, as the scalar ones); declaring them simd lets GCC call
// _ZGVeN16v_erff and friends from vectorised loops (`#pragma omp simd`, or loops GCC vectorises
// itself), as glibc's own headers do under -ffast-math, without its other licences. Float32
// only: float64 keeps the scalar functions.
#pragma once

extern "C" {
#pragma omp declare simd notinbranch
float erff(float);
#pragma omp declare simd notinbranch
float expf(float);
}
