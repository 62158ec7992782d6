/* The memory-plan picture of `flowgraph plan` and `flowgraph profile`
 * (--memory-svg). */
#ifndef FG_CLI_SVG_H
#define FG_CLI_SVG_H

#include "flowgraph/dist.h"
#include "flowgraph/profile.h"

/* Writes a standalone SVG of `info` to `path` (temporary name, then
 * rename): steps across, arena offset down, one <rect> per arena tensor
 * (and no other <rect>), labelled with its name where it fits, with a
 * <title> tooltip (name, type, bytes, offset, lifetime), step and byte
 * ticks, and a legend line with the arena, lower-bound and naive sizes.
 * `title` names the model. A plan over several devices, or the plans of
 * several ranks (infos[r], n_infos > 1), get one plot per device holding
 * tensors, stacked and headed by the device's name from `part` (NULL:
 * "?"), its tensor count and arena; the legend adds the plans up. */
int svg_write_memory_plan(const char *path, const fg_plan_info *const *infos, int n_infos,
                          const fg_partition *part, const char *title, fg_status *st);

#endif
