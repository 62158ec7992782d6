/* The memory-plan picture of `flowgraph plan` and `flowgraph profile`
 * (--memory-svg). */
#ifndef FG_CLI_SVG_H
#define FG_CLI_SVG_H

#include <stdint.h>
#include <stdio.h>

#include "flowgraph/dist.h"
#include "flowgraph/profile.h"

/* Helpers shared with train_plot.c (the training curves). */
/* Writes `s` as XML text: markup characters escaped, control characters and
 * invalid UTF-8 as '?', at most `max_chars` characters ("..." when cut). */
void xml_text(FILE *f, const char *s, int max_chars);
/* 1, 2 or 5 times a power of ten, at least range / target: an axis step. */
uint64_t nice_step(uint64_t range, int target);

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
