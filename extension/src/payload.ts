/**
 * The `application/vnd.tile-nb.kernel+json` payload and its defensive parser.
 *
 * The payload is produced by `tile_nb/notebook` (Python). Notebooks outlive both
 * sides, so a view must cope with payloads written by an older or newer tile_nb:
 * `parsePayload` never throws; it keeps what it understands and returns short
 * warnings for the rest, which the view shows above the kernel.
 */

/** The MIME type this extension renders. */
export const KERNEL_MIME_TYPE = 'application/vnd.tile-nb.kernel+json';

/**
 * The payload version this extension was written for. Version 2 adds the kernel's `source` lines and each
 * section's `line_map`; a version-1 payload is version 2 without them (no line mapping, no warning).
 */
export const PAYLOAD_VERSION = 2;

export type ParamKind = 'tensor' | 'scalar' | 'const' | 'dynamic' | 'compile_time';
export type SectionId = 'template' | 'specialized' | 'plan' | 'lowered' | 'cuda' | 'ptx' | 'sass';
export type SectionLanguage = 'python' | 'cuda' | 'ptx' | 'text';

export interface IKernelParam {
  name: string;
  /** One of `ParamKind`; an unknown kind from a newer tile_nb is kept as is. */
  kind: string;
  annotation: string;
}

export interface IKernelSection {
  /** One of `SectionId`; an unknown id from a newer tile_nb is kept and shown as a tab. */
  id: string;
  title: string;
  language: string;
  text: string;
  /** 1-based line numbers of `text` that differ from the template (only for "specialized"). */
  changedLines: number[] | null;
  note: string | null;
  /** Source line -> the 1-based lines of `text` it became (empty when the payload has no mapping). */
  lineMap: Map<number, number[]>;
}

/** The kernel's source lines (from its file or notebook cell): `lines[k]` is line `firstLine + k`. */
export interface IKernelSource {
  firstLine: number;
  lines: string[];
}

export interface IKernelResources {
  registers: number | null;
  sharedBytes: number | null;
  spillStores: number | null;
  spillLoads: number | null;
}

export interface IKernelRun {
  device: string;
  maxAbsErr: number | null;
}

/** The normalized kernel view: every field present, with the right type. */
export interface IKernelView {
  version: number | null;
  name: string;
  params: IKernelParam[];
  consts: Array<[string, number]>;
  backend: string | null;
  sections: IKernelSection[];
  resources: IKernelResources | null;
  timingsMs: Array<[string, number]>;
  run: IKernelRun | null;
  source: IKernelSource | null;
  /** The view's notes (the ones the static HTML shows, e.g. "N: T.dynamic, so phase 2 keeps it symbolic ..."). */
  notes: string[];
}

export interface IParseResult {
  /** `null` only when nothing usable was found (the payload is not an object). */
  view: IKernelView | null;
  /** Short, user-facing messages about what was skipped or guessed. */
  warnings: string[];
}

const KNOWN_TOP_LEVEL = new Set([
  'version',
  'name',
  'params',
  'consts',
  'backend',
  'sections',
  'resources',
  'timings_ms',
  'run',
  'source',
  'notes'
]);

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function isFiniteNumber(value: unknown): value is number {
  return typeof value === 'number' && Number.isFinite(value);
}

function asString(value: unknown, fallback: string): string {
  return typeof value === 'string' ? value : fallback;
}

function asNumberOrNull(value: unknown): number | null {
  return isFiniteNumber(value) ? value : null;
}

function parseParams(raw: unknown, warnings: string[]): IKernelParam[] {
  if (raw === undefined) {
    return [];
  }
  if (!Array.isArray(raw)) {
    warnings.push('"params" is not a list; parameters are not shown.');
    return [];
  }
  const params: IKernelParam[] = [];
  let skipped = 0;
  for (const item of raw) {
    if (!isObject(item) || typeof item.name !== 'string') {
      skipped += 1;
      continue;
    }
    params.push({
      name: item.name,
      kind: asString(item.kind, 'unknown'),
      annotation: asString(item.annotation, '')
    });
  }
  if (skipped) {
    warnings.push(`${skipped} parameter entr${skipped === 1 ? 'y' : 'ies'} could not be read.`);
  }
  return params;
}

function parseConsts(raw: unknown, warnings: string[]): Array<[string, number]> {
  if (raw === undefined || raw === null) {
    return [];
  }
  if (!isObject(raw)) {
    warnings.push('"consts" is not a mapping; compile-time constants are not shown.');
    return [];
  }
  const consts: Array<[string, number]> = [];
  for (const [name, value] of Object.entries(raw)) {
    if (isFiniteNumber(value)) {
      consts.push([name, value]);
    }
  }
  return consts;
}

function parseChangedLines(raw: unknown): number[] | null {
  if (!Array.isArray(raw)) {
    return null;
  }
  const lines = raw.filter((n): n is number => Number.isInteger(n) && (n as number) >= 1);
  return Array.from(new Set(lines)).sort((a, b) => a - b);
}

/** `{"18": [9, 10]}` -> Map(18 => [9, 10]); entries that are not positive line numbers are dropped. */
function parseLineMap(raw: unknown): Map<number, number[]> {
  const map = new Map<number, number[]>();
  if (!isObject(raw)) {
    return map;
  }
  for (const [key, value] of Object.entries(raw)) {
    const line = Number(key);
    if (!Number.isInteger(line) || line < 1 || !Array.isArray(value)) {
      continue;
    }
    const lines = value.filter((n): n is number => Number.isInteger(n) && (n as number) >= 1);
    if (lines.length) {
      map.set(line, Array.from(new Set(lines)).sort((a, b) => a - b));
    }
  }
  return map;
}

function parseSource(raw: unknown): IKernelSource | null {
  if (!isObject(raw) || !Number.isInteger(raw.first_line) || !Array.isArray(raw.lines)) {
    return null;
  }
  if (!raw.lines.every(line => typeof line === 'string') || (raw.first_line as number) < 1) {
    return null;
  }
  return { firstLine: raw.first_line as number, lines: raw.lines as string[] };
}

function parseSections(raw: unknown, warnings: string[]): IKernelSection[] {
  if (raw === undefined) {
    warnings.push('The payload has no "sections"; there is no IR to show.');
    return [];
  }
  if (!Array.isArray(raw)) {
    warnings.push('"sections" is not a list; there is no IR to show.');
    return [];
  }
  const sections: IKernelSection[] = [];
  const seen = new Set<string>();
  let skipped = 0;
  for (const item of raw) {
    if (!isObject(item) || typeof item.id !== 'string' || typeof item.text !== 'string') {
      skipped += 1;
      continue;
    }
    if (seen.has(item.id)) {
      warnings.push(`Section "${item.id}" appears twice; the first one is shown.`);
      continue;
    }
    seen.add(item.id);
    sections.push({
      id: item.id,
      title: asString(item.title, item.id),
      language: asString(item.language, 'text'),
      text: item.text,
      changedLines: parseChangedLines(item.changed_lines),
      note: typeof item.note === 'string' && item.note.length > 0 ? item.note : null,
      lineMap: parseLineMap(item.line_map)
    });
  }
  if (skipped) {
    warnings.push(`${skipped} section${skipped === 1 ? '' : 's'} without an "id" or "text" could not be shown.`);
  }
  return sections;
}

function parseResources(raw: unknown): IKernelResources | null {
  if (!isObject(raw)) {
    return null;
  }
  const resources: IKernelResources = {
    registers: asNumberOrNull(raw.registers),
    sharedBytes: asNumberOrNull(raw.shared_bytes),
    spillStores: asNumberOrNull(raw.spill_stores),
    spillLoads: asNumberOrNull(raw.spill_loads)
  };
  const anyKnown = Object.values(resources).some(v => v !== null);
  return anyKnown ? resources : null;
}

function parseTimings(raw: unknown): Array<[string, number]> {
  if (!isObject(raw)) {
    return [];
  }
  return Object.entries(raw).filter((entry): entry is [string, number] => isFiniteNumber(entry[1]));
}

function parseRun(raw: unknown): IKernelRun | null {
  if (!isObject(raw)) {
    return null;
  }
  return { device: asString(raw.device, 'unknown device'), maxAbsErr: asNumberOrNull(raw.max_abs_err) };
}

function parseNotes(raw: unknown): string[] {
  // Absent from payloads of tile_nb before the notes were added: no notes, no warning.
  return Array.isArray(raw) ? raw.filter((note): note is string => typeof note === 'string' && note.length > 0) : [];
}

/**
 * Read a payload of unknown shape into an `IKernelView`.
 *
 * Never throws. A payload that is not a JSON object gives `view: null` and one
 * warning; everything else gives a view with defaults for missing fields.
 *
 * Example: `parsePayload({version: 1, name: 'gemm', sections: []}).view.name === 'gemm'`.
 */
export function parsePayload(raw: unknown): IParseResult {
  const warnings: string[] = [];
  let data: unknown = raw;
  if (typeof data === 'string') {
    // A bundle written by hand (or by an old nbformat writer) may hold the JSON as text.
    try {
      data = JSON.parse(data);
    } catch {
      return { view: null, warnings: ['The kernel view payload is text that is not valid JSON.'] };
    }
  }
  if (!isObject(data)) {
    return { view: null, warnings: ['The kernel view payload is not a JSON object.'] };
  }

  const version = isFiniteNumber(data.version) ? data.version : null;
  if (version === null) {
    warnings.push('The payload has no version; showing what this extension can read.');
  } else if (version > PAYLOAD_VERSION) {
    warnings.push(
      `Payload version ${version} is newer than this extension understands (${PAYLOAD_VERSION}); ` +
        'showing what it can. Updating tile-nb-labextension may show more.'
    );
  } else if (version < 1) {
    warnings.push(`Payload version ${version} is older than 1; showing what it can.`);
  }

  const view: IKernelView = {
    version,
    name: asString(data.name, '(unnamed kernel)'),
    params: parseParams(data.params, warnings),
    consts: parseConsts(data.consts, warnings),
    backend: typeof data.backend === 'string' ? data.backend : null,
    sections: parseSections(data.sections, warnings),
    resources: parseResources(data.resources),
    timingsMs: parseTimings(data.timings_ms),
    run: parseRun(data.run),
    source: parseSource(data.source),
    notes: parseNotes(data.notes)
  };

  // Unknown top-level fields are expected from newer payloads; say so only when
  // the version does not already explain it.
  const unknown = Object.keys(data).filter(key => !KNOWN_TOP_LEVEL.has(key));
  if (unknown.length && version !== null && version <= PAYLOAD_VERSION) {
    warnings.push(`Fields not shown: ${unknown.sort().join(', ')}.`);
  }
  return { view, warnings };
}

/** The section with this id, or `undefined`. */
export function findSection(view: IKernelView, id: string): IKernelSection | undefined {
  return view.sections.find(section => section.id === id);
}
