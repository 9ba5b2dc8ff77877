/*
** A policy with a flag this core does not know (a later minor's): the Trainer refuses it rather than
** train without what the policy asked for.
*/
#define FLAG_NAME "unknownflag"
#define FLAG_DESCRIPTION "test: a policy flag the core does not know"
#define FLAG_WEIGHTS LAMP_BF16
#define FLAG_FLAGS (LAMP_POLICY_MASTER_WEIGHTS | 0x80u)
#define FLAG_ABI_MINOR LAMP_ABI_MINOR
#include "flag_policy.h"
