/*
** A precision policy asking for stochastic rounding (ABI 1.4) with f32 weights: there is nothing to
** round, and the Trainer refuses it.
*/
#define FLAG_NAME "srf32"
#define FLAG_DESCRIPTION "test: stochastic rounding asked for with f32 weights"
#define FLAG_WEIGHTS LAMP_F32
#define FLAG_FLAGS LAMP_POLICY_STOCHASTIC_ROUNDING
#define FLAG_ABI_MINOR LAMP_ABI_MINOR
#include "flag_policy.h"
