/* activation.c — facts about f8_activation shared by modules and backends. */
#include "f8.h"

int f8_activation_gated(f8_activation act)
{
    return act == F8_ACT_GEGLU || act == F8_ACT_REGLU || act == F8_ACT_SWIGLU;
}
