/**
 * Line alignment between the template (phase 1) and specialized (phase 2) IR.
 *
 * Specializing a kernel mostly replaces symbols by numbers (`M` -> `1024`) and
 * sometimes folds or drops lines, so a longest-common-subsequence alignment of
 * lines gives: which lines changed on each side, which template line a
 * specialized line came from (for synchronized scrolling and word highlights),
 * and which words inside a changed line differ.
 */

/** How the lines of two texts correspond. All indices are 0-based. */
export interface ILineAlignment {
  /** For each line of `a`, its partner line in `b` (identical or changed), or -1. */
  aToB: number[];
  /** For each line of `b`, its partner line in `a` (identical or changed), or -1. */
  bToA: number[];
  /** `true` for lines of `a` that have no identical partner in `b`. */
  aChanged: boolean[];
  /** `true` for lines of `b` that have no identical partner in `a`. */
  bChanged: boolean[];
}

/** Above this many cells in the LCS table, the middle part is paired by position instead. */
const MAX_LCS_CELLS = 4_000_000;

/** Split text into lines; a trailing newline does not make an extra empty line. */
export function splitLines(text: string): string[] {
  const lines = text.split(/\r\n|\r|\n/);
  if (lines.length > 1 && lines[lines.length - 1] === '') {
    lines.pop();
  }
  return lines;
}

/**
 * Longest common subsequence of two sequences, as a list of index pairs in order.
 * Plain O(n*m) dynamic programming; callers keep n*m bounded.
 */
function lcsPairs<T>(a: T[], b: T[]): Array<[number, number]> {
  const n = a.length;
  const m = b.length;
  // lengths[i][j] = LCS length of a[i:] and b[j:], flattened row-major.
  const width = m + 1;
  const lengths = new Uint32Array((n + 1) * width);
  for (let i = n - 1; i >= 0; i--) {
    for (let j = m - 1; j >= 0; j--) {
      lengths[i * width + j] =
        a[i] === b[j]
          ? lengths[(i + 1) * width + j + 1] + 1
          : Math.max(lengths[(i + 1) * width + j], lengths[i * width + j + 1]);
    }
  }
  const pairs: Array<[number, number]> = [];
  let i = 0;
  let j = 0;
  while (i < n && j < m) {
    if (a[i] === b[j]) {
      pairs.push([i, j]);
      i++;
      j++;
    } else if (lengths[(i + 1) * width + j] >= lengths[i * width + j + 1]) {
      i++;
    } else {
      j++;
    }
  }
  return pairs;
}

/** How alike two lines are: 0 (no common words) to 1 (same words), ignoring spaces. */
export function lineSimilarity(x: string, y: string): number {
  const tx = wordTokens(x).filter(t => t.trim().length > 0);
  const ty = wordTokens(y).filter(t => t.trim().length > 0);
  if (tx.length + ty.length === 0) {
    return 1;
  }
  if (tx.length * ty.length > 250_000) {
    return 0;
  }
  return (2 * lcsPairs(tx, ty).length) / (tx.length + ty.length);
}

/** Below this similarity, two changed lines are not treated as versions of each other. */
const MIN_SIMILARITY = 0.4;
/** Runs of changed lines larger than this are paired by position (the DP below is quadratic). */
const MAX_RUN_FOR_SIMILARITY = 200;

/**
 * Pair the lines of two runs of changed lines, in order, maximizing total similarity
 * (so `A = buf(M)` pairs with `A = buf(1024)` even when a line was dropped before it).
 */
function pairSimilar(runA: string[], runB: string[]): Array<[number, number]> {
  const n = runA.length;
  const m = runB.length;
  if (n === 0 || m === 0) {
    return [];
  }
  if (n > MAX_RUN_FOR_SIMILARITY || m > MAX_RUN_FOR_SIMILARITY) {
    return Array.from({ length: Math.min(n, m) }, (_, k) => [k, k] as [number, number]);
  }
  const width = m + 1;
  const best = new Float64Array((n + 1) * width);
  const sim = (i: number, j: number) => lineSimilarity(runA[i], runB[j]);
  const sims = new Float64Array(n * m);
  for (let i = 0; i < n; i++) {
    for (let j = 0; j < m; j++) {
      sims[i * m + j] = sim(i, j);
    }
  }
  for (let i = n - 1; i >= 0; i--) {
    for (let j = m - 1; j >= 0; j--) {
      const s = sims[i * m + j];
      const take = s >= MIN_SIMILARITY ? best[(i + 1) * width + j + 1] + s : -1;
      best[i * width + j] = Math.max(take, best[(i + 1) * width + j], best[i * width + j + 1]);
    }
  }
  const pairs: Array<[number, number]> = [];
  let i = 0;
  let j = 0;
  while (i < n && j < m) {
    const s = sims[i * m + j];
    if (s >= MIN_SIMILARITY && best[i * width + j] === best[(i + 1) * width + j + 1] + s) {
      pairs.push([i, j]);
      i++;
      j++;
    } else if (best[(i + 1) * width + j] >= best[i * width + j + 1]) {
      i++;
    } else {
      j++;
    }
  }
  return pairs;
}

/**
 * Align the lines of `a` (template) and `b` (specialized).
 *
 * Identical lines are matched by LCS; between two matched lines, the unmatched
 * lines of each side are paired in order by word similarity (they are the
 * "changed" versions of each other); lines with no similar counterpart (a
 * dropped `M = T.int32()`) stay without a partner.
 */
export function alignLines(a: string[], b: string[]): ILineAlignment {
  const aToB = new Array<number>(a.length).fill(-1);
  const bToA = new Array<number>(b.length).fill(-1);
  const aChanged = new Array<boolean>(a.length).fill(true);
  const bChanged = new Array<boolean>(b.length).fill(true);

  // Trim the common prefix and suffix first: usually most of the text.
  let start = 0;
  while (start < a.length && start < b.length && a[start] === b[start]) {
    start++;
  }
  let endA = a.length;
  let endB = b.length;
  while (endA > start && endB > start && a[endA - 1] === b[endB - 1]) {
    endA--;
    endB--;
  }
  const matches: Array<[number, number]> = [];
  for (let k = 0; k < start; k++) {
    matches.push([k, k]);
  }
  const midA = a.slice(start, endA);
  const midB = b.slice(start, endB);
  if (midA.length * midB.length <= MAX_LCS_CELLS) {
    for (const [i, j] of lcsPairs(midA, midB)) {
      matches.push([i + start, j + start]);
    }
  }
  for (let k = 0; k < a.length - endA; k++) {
    matches.push([endA + k, endB + k]);
  }

  // Record identical matches, then pair the unmatched runs between them.
  let prevA = -1;
  let prevB = -1;
  const pairRun = (fromA: number, toA: number, fromB: number, toB: number) => {
    for (const [i, j] of pairSimilar(a.slice(fromA, toA), b.slice(fromB, toB))) {
      aToB[fromA + i] = fromB + j;
      bToA[fromB + j] = fromA + i;
    }
  };
  for (const [i, j] of matches) {
    pairRun(prevA + 1, i, prevB + 1, j);
    aToB[i] = j;
    bToA[j] = i;
    aChanged[i] = false;
    bChanged[j] = false;
    prevA = i;
    prevB = j;
  }
  pairRun(prevA + 1, a.length, prevB + 1, b.length);
  return { aToB, bToA, aChanged, bChanged };
}

/** 1-based numbers of the `true` entries. */
export function changedLineNumbers(changed: boolean[]): number[] {
  const numbers: number[] = [];
  changed.forEach((isChanged, index) => {
    if (isChanged) {
      numbers.push(index + 1);
    }
  });
  return numbers;
}

/**
 * Map a (fractional, 0-based) line position of one side to the other side.
 *
 * `partner` is `aToB` or `bToA`. The nearest line at or above `position` that
 * has a partner is the anchor; the distance from it is kept. Used to keep the
 * two panes showing corresponding code while scrolling.
 */
export function mapLinePosition(partner: number[], otherLength: number, position: number): number {
  if (partner.length === 0 || otherLength === 0) {
    return 0;
  }
  const top = Math.max(0, Math.min(partner.length - 1, Math.floor(position)));
  const fraction = position - Math.floor(position);
  for (let k = top; k >= 0; k--) {
    if (partner[k] >= 0) {
      const mapped = partner[k] + (top - k) + fraction;
      return Math.max(0, Math.min(otherLength, mapped));
    }
  }
  return Math.max(0, Math.min(otherLength, position));
}

/** Split a line into words, runs of spaces and single punctuation characters. */
export function wordTokens(line: string): string[] {
  return line.match(/[A-Za-z0-9_.]+|\s+|[^A-Za-z0-9_.\s]/g) ?? [];
}

/**
 * Character ranges `[start, end)` of `line` whose words are not in `other`: used to
 * emphasize `1024` in a specialized line whose template had `M`.
 *
 * The common leading and trailing words are trimmed first. When what remains is
 * mostly different (a whole expression replaced: `(K + 31) // 32` -> `32`), it is
 * one range; otherwise the words not on the longest common subsequence are, with
 * neighbours separated only by spaces merged.
 */
export function changedRanges(other: string, line: string): Array<[number, number]> {
  const mine = wordTokens(line);
  const theirs = wordTokens(other);
  let head = 0;
  while (head < mine.length && head < theirs.length && mine[head] === theirs[head]) {
    head++;
  }
  let tail = 0;
  while (
    tail < mine.length - head &&
    tail < theirs.length - head &&
    mine[mine.length - 1 - tail] === theirs[theirs.length - 1 - tail]
  ) {
    tail++;
  }
  // A pure insertion or deletion leaves one middle without words (`(K + 31) // 32` -> `32`
  // trims to `(K + 31) // ` -> ``): give back trimmed words until both middles have one, so
  // the new line marks `32` and the old one the whole replaced expression.
  const hasWord = (tokens: string[], from: number, to: number) =>
    tokens.slice(from, to).some(token => token.trim().length > 0);
  while (
    (head > 0 || tail > 0) &&
    (!hasWord(mine, head, mine.length - tail) || !hasWord(theirs, head, theirs.length - tail))
  ) {
    if (tail > 0) {
      tail--;
    } else {
      head--;
    }
  }
  const middle = mine.slice(head, mine.length - tail);
  const otherMiddle = theirs.slice(head, theirs.length - tail);
  const offsets: number[] = [];
  let offset = 0;
  for (const token of mine) {
    offsets.push(offset);
    offset += token.length;
  }
  const startOf = (index: number) => offsets[head + index];
  const endOf = (index: number) => offsets[head + index] + middle[index].length;
  const solid = (token: string) => token.trim().length > 0;

  let kept = new Set<number>();
  const wholeMiddle =
    middle.length * otherMiddle.length > 250_000 ||
    lineSimilarity(middle.join(''), otherMiddle.join('')) < 0.5;
  if (!wholeMiddle) {
    kept = new Set(lcsPairs(middle, otherMiddle).map(([i]) => i));
  }
  const ranges: Array<[number, number]> = [];
  middle.forEach((token, index) => {
    if (kept.has(index) || !solid(token)) {
      return;
    }
    const last = ranges[ranges.length - 1];
    const gap = last ? line.slice(last[1], startOf(index)) : '';
    // In a wholly replaced middle, everything joins into one range.
    if (last && (wholeMiddle || /^\s*$/.test(gap))) {
      last[1] = endOf(index);
    } else {
      ranges.push([startOf(index), endOf(index)]);
    }
  });
  return ranges;
}

/**
 * The rows of the side-by-side view: `[template index, specialized index]` (0-based, -1 for an empty side), in
 * order. Paired lines share a row, so both sides stay row-aligned whatever specialization dropped or added.
 */
export function alignedRows(alignment: ILineAlignment): Array<[number, number]> {
  const rows: Array<[number, number]> = [];
  const n = alignment.aToB.length;
  const m = alignment.bToA.length;
  let i = 0;
  let j = 0;
  while (i < n || j < m) {
    if (i < n && j < m && alignment.aToB[i] === j) {
      rows.push([i++, j++]);
    } else if (i < n && (alignment.aToB[i] === -1 || j >= m || alignment.aToB[i] < j)) {
      rows.push([i++, -1]);
    } else {
      rows.push([-1, j++]);
    }
  }
  return rows;
}
