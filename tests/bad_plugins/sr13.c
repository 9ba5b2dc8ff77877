/*
** A plugin built for ABI 1.3 whose policy sets the bit ABI 1.4 gave to stochastic rounding: for 1.3
** the bit meant nothing, so the Trainer refuses it rather than guess.
*/
#define FLAG_NAME "sr13"
#define FLAG_DESCRIPTION "test: the stochastic-rounding bit from a 1.3 plugin"
#define FLAG_WEIGHTS LAMP_BF16
#define FLAG_FLAGS LAMP_POLICY_STOCHASTIC_ROUNDING
#define FLAG_ABI_MINOR 3
#include "flag_policy.h"
