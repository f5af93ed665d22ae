/**
 * Recognizing a `%%tilekernel` cell. Pure string code, shared by the editor
 * decoration (tilekernel.ts) and the notebook plugin (index.ts), and unit-tested.
 */

/** The cell magic registered by `%load_ext tile_nb`. */
export const TILEKERNEL_MAGIC = '%%tilekernel';

/** Editor mime type of a `%%tilekernel` cell: Python highlighting plus the magic-line marker. */
export const TILEKERNEL_MIME = 'text/x-tile-nb-tilekernel';

export interface ITileMagic {
  /** 0-based line index of the magic line. */
  line: number;
  /** Offset of `%%tilekernel` in the source. */
  from: number;
  /** Offset of the end of the magic line (before its newline). */
  to: number;
  /** The rest of the magic line, trimmed (`--shapes M=1024 ...`). */
  options: string;
}

/**
 * Where the `%%tilekernel` line of a cell is, or `null` when the cell is not a tile kernel cell.
 *
 * Like IPython, blank lines before the magic are allowed; anything else before it
 * (a comment, code, indentation) means the cell is not a cell magic. The magic
 * name must end at a space or the line end (`%%tilekernels` is another magic).
 */
export function findTileMagic(source: string): ITileMagic | null {
  let offset = 0;
  let line = 0;
  while (offset <= source.length) {
    const newline = source.indexOf('\n', offset);
    const end = newline < 0 ? source.length : newline;
    const text = source.slice(offset, end).replace(/\r$/, '');
    if (text.trim().length === 0) {
      if (newline < 0) {
        return null;
      }
      offset = newline + 1;
      line += 1;
      continue;
    }
    if (!text.startsWith(TILEKERNEL_MAGIC)) {
      return null;
    }
    const rest = text.slice(TILEKERNEL_MAGIC.length);
    if (rest.length > 0 && !/^\s/.test(rest)) {
      return null;
    }
    return { line, from: offset, to: offset + text.length, options: rest.trim() };
  }
  return null;
}
