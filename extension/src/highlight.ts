/**
 * A small line-based syntax highlighter for the kernel view.
 *
 * The view renders plain DOM (no editor instance per section, which would be
 * heavy for six sections of a few hundred lines each), so it colors tokens with
 * a few regular expressions per language. Only classes are produced; the
 * colors come from JupyterLab's theme variables in style/base.css.
 */

export interface IToken {
  text: string;
  /** CSS class suffix (`keyword`, `number`, ...), or `null` for plain text. */
  kind: string | null;
}

/** A highlighted piece of a line that also knows whether it lies in a changed range. */
export interface IPiece extends IToken {
  changed: boolean;
}

interface IRule {
  pattern: RegExp;
  kind: string | ((match: string) => string | null);
}

const PYTHON_KEYWORDS = new Set(
  (
    'and as assert async await break class continue def del elif else except finally for from global if ' +
    'import in is lambda nonlocal not or pass raise return try while with yield'
  ).split(' ')
);
const PYTHON_CONSTANTS = new Set(['True', 'False', 'None']);

const CUDA_KEYWORDS = new Set(
  (
    'if else for while do return break continue switch case default goto struct union enum typedef ' +
    'static const constexpr volatile extern inline template typename namespace using sizeof ' +
    '__global__ __device__ __host__ __shared__ __constant__ __restrict__ __forceinline__ ' +
    '__launch_bounds__ __syncthreads asm'
  ).split(' ')
);
const CUDA_TYPES = new Set(
  (
    'void bool char short int long float double signed unsigned size_t half nv_bfloat16 uint int8_t ' +
    'int16_t int32_t int64_t uint8_t uint16_t uint32_t uint64_t float2 float4 half2 uint2 uint4 dim3'
  ).split(' ')
);

const RULES: Record<string, IRule[]> = {
  python: [
    { pattern: /#.*/y, kind: 'comment' },
    { pattern: /("([^"\\]|\\.)*"?|'([^'\\]|\\.)*'?)/y, kind: 'string' },
    { pattern: /@[A-Za-z_][\w.]*/y, kind: 'decorator' },
    { pattern: /\b(0x[0-9a-fA-F]+|\d+(\.\d*)?([eE][-+]?\d+)?)\b/y, kind: 'number' },
    { pattern: /T\.[A-Za-z_][\w.]*/y, kind: 'builtin' },
    {
      pattern: /[A-Za-z_]\w*/y,
      kind: word => (PYTHON_KEYWORDS.has(word) ? 'keyword' : PYTHON_CONSTANTS.has(word) ? 'number' : null)
    }
  ],
  cuda: [
    { pattern: /\/\/.*/y, kind: 'comment' },
    { pattern: /\/\*.*?(\*\/|$)/y, kind: 'comment' },
    { pattern: /^\s*#\s*\w+.*/y, kind: 'meta' },
    { pattern: /"([^"\\]|\\.)*"?/y, kind: 'string' },
    { pattern: /\b(0x[0-9a-fA-F]+|\d+(\.\d*)?([eE][-+]?\d+)?[fFuUlL]*)\b/y, kind: 'number' },
    {
      pattern: /[A-Za-z_]\w*/y,
      kind: word => (CUDA_KEYWORDS.has(word) ? 'keyword' : CUDA_TYPES.has(word) ? 'type' : null)
    }
  ],
  ptx: [
    { pattern: /\/\/.*/y, kind: 'comment' },
    { pattern: /\.[A-Za-z_][\w]*/y, kind: 'keyword' },
    { pattern: /%[A-Za-z_][\w.]*/y, kind: 'variable' },
    { pattern: /\b(0[xX][0-9a-fA-F]+|0[fF][0-9a-fA-F]{8}|\d+(\.\d*)?)\b/y, kind: 'number' },
    { pattern: /^\s*[A-Za-z_$][\w$]*:/y, kind: 'meta' },
    { pattern: /@!?%\w+/y, kind: 'meta' }
  ]
};
// SASS is close enough to PTX for a few colors (comments, registers, numbers).
RULES.sass = RULES.ptx;

/** Tokenize one line of `language` (`python`, `cuda`, `ptx`, `sass`; anything else is plain). */
export function tokenizeLine(line: string, language: string): IToken[] {
  const rules = RULES[language];
  if (!rules || line.length === 0) {
    return line.length ? [{ text: line, kind: null }] : [];
  }
  const tokens: IToken[] = [];
  let plainStart = 0;
  let pos = 0;
  const flushPlain = (end: number) => {
    if (end > plainStart) {
      tokens.push({ text: line.slice(plainStart, end), kind: null });
    }
  };
  while (pos < line.length) {
    let matched = false;
    for (const rule of rules) {
      rule.pattern.lastIndex = pos;
      const match = rule.pattern.exec(line);
      if (!match || match[0].length === 0) {
        continue;
      }
      // Rules anchored with `^` only apply at the line start.
      if (rule.pattern.source.startsWith('^') && pos !== 0) {
        continue;
      }
      // A word-like match must not start inside a word (e.g. `x1` is not a number).
      if (/^\w/.test(match[0]) && pos > 0 && /\w/.test(line[pos - 1])) {
        continue;
      }
      const text = match[0];
      const kind = typeof rule.kind === 'function' ? rule.kind(text) : rule.kind;
      flushPlain(pos);
      if (kind === null) {
        tokens.push({ text, kind: null });
      } else {
        tokens.push({ text, kind });
      }
      pos += text.length;
      plainStart = pos;
      matched = true;
      break;
    }
    if (!matched) {
      pos += 1;
    }
  }
  flushPlain(line.length);
  // Merge neighbouring plain tokens so the DOM stays small.
  const merged: IToken[] = [];
  for (const token of tokens) {
    const last = merged[merged.length - 1];
    if (last && last.kind === null && token.kind === null) {
      last.text += token.text;
    } else {
      merged.push({ ...token });
    }
  }
  return merged;
}

/**
 * Split tokens at the boundaries of `ranges` (sorted, `[start, end)` in characters),
 * so each piece is either wholly inside a changed range or wholly outside.
 */
export function splitByRanges(tokens: IToken[], ranges: Array<[number, number]>): IPiece[] {
  const pieces: IPiece[] = [];
  let offset = 0;
  for (const token of tokens) {
    const start = offset;
    const end = offset + token.text.length;
    const cuts = new Set<number>([start, end]);
    for (const [rs, re] of ranges) {
      if (rs > start && rs < end) {
        cuts.add(rs);
      }
      if (re > start && re < end) {
        cuts.add(re);
      }
    }
    const points = Array.from(cuts).sort((x, y) => x - y);
    for (let k = 0; k + 1 < points.length; k++) {
      const from = points[k];
      const to = points[k + 1];
      const changed = ranges.some(([rs, re]) => from >= rs && to <= re);
      pieces.push({ text: token.text.slice(from - start, to - start), kind: token.kind, changed });
    }
    offset = end;
  }
  return pieces;
}
