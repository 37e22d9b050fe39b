/*
 * machine.c - the public view of the machine kiln runs on (kiln_physical_cores,
 * kiln_physical_memory), so that front ends size their defaults (threads, context, caches) with
 * the same numbers the library uses for its own.
 */
#include "base/base.h"

int32_t kiln_physical_cores(void) { return (int32_t)kn_physical_cores(); }

uint64_t kiln_physical_memory(void) { return kn_physical_memory(); }
