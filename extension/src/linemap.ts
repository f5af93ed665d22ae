/**
 * Line mapping between a kernel's source (its notebook cell or file) and the sections of its view.
 *
 * The payload (version 2) carries the kernel's source lines and, per section, `line_map`: source line -> the
 * section lines it became. A view and a notebook cell find each other by content: the view's source lines must be
 * the cell's lines at the same line numbers (a `%%tilekernel` cell is compiled with its magic line as line 1, so its
 * numbers are the cell's). Pure code, shared by the view (view.ts) and the notebook plugin (index.ts).
 */

import { IKernelSection, IKernelSource } from './payload';

/** Bubbles from a kernel view when the pointer is on a mapped line (`lines: null` when it leaves). */
export const SOURCE_HOVER_EVENT = 'tnb-source-hover';
/** Sent to a kernel view to highlight what source lines became (`lines: null` clears; `pin` keeps it). */
export const SOURCE_HIGHLIGHT_EVENT = 'tnb-source-highlight';

export interface ISourceHoverDetail {
  /** Source line numbers (of the kernel's file or cell), or null when nothing is hovered. */
  lines: number[] | null;
  source: IKernelSource | null;
  pin: boolean;
}

export interface ISourceHighlightDetail {
  lines: number[] | null;
  /** The lines of the cell the numbers refer to; the view ignores the event unless its source matches them. */
  cellLines: string[];
  pin: boolean;
}

/** Whether `source` is the text of `cellLines` at the same line numbers (trailing whitespace ignored). */
export function sourceMatches(source: IKernelSource | null, cellLines: string[]): boolean {
  if (!source || source.lines.length === 0) {
    return false;
  }
  const offset = source.firstLine - 1;
  if (offset + source.lines.length > cellLines.length) {
    return false;
  }
  return source.lines.every((line, k) => line.trimEnd() === cellLines[offset + k].trimEnd());
}

/** For one section: section line -> the source lines it came from (the inverse of `lineMap`). */
export function originsOf(section: IKernelSection): Map<number, number[]> {
  const origins = new Map<number, number[]>();
  for (const [sourceLine, lines] of section.lineMap) {
    for (const line of lines) {
      const list = origins.get(line) ?? [];
      list.push(sourceLine);
      origins.set(line, list);
    }
  }
  for (const list of origins.values()) {
    list.sort((a, b) => a - b);
  }
  return origins;
}

/** The lines of `section` that the source lines became. */
export function mappedLines(section: IKernelSection, sourceLines: number[]): Set<number> {
  const lines = new Set<number>();
  for (const sourceLine of sourceLines) {
    for (const line of section.lineMap.get(sourceLine) ?? []) {
      lines.add(line);
    }
  }
  return lines;
}
