import {
  alignLines,
  changedLineNumbers,
  changedRanges,
  lineSimilarity,
  mapLinePosition,
  splitLines,
  wordTokens
} from '../src/diff';

describe('splitLines', () => {
  it('drops one trailing newline and handles CRLF', () => {
    expect(splitLines('a\nb\n')).toEqual(['a', 'b']);
    expect(splitLines('a\r\nb')).toEqual(['a', 'b']);
    expect(splitLines('')).toEqual(['']);
  });
});

describe('alignLines', () => {
  it('marks substituted lines on both sides and pairs them', () => {
    const a = ['def f():', '    x = M', '    y = 2', 'return'];
    const b = ['def f():', '    x = 1024', '    y = 2', 'return'];
    const al = alignLines(a, b);
    expect(changedLineNumbers(al.aChanged)).toEqual([2]);
    expect(changedLineNumbers(al.bChanged)).toEqual([2]);
    expect(al.aToB).toEqual([0, 1, 2, 3]);
    expect(al.bToA).toEqual([0, 1, 2, 3]);
  });

  it('handles a line removed by specialization', () => {
    const a = ['head', 'M = T.int32()', 'A = buf(M)', 'tail'];
    const b = ['head', 'A = buf(1024)', 'tail'];
    const al = alignLines(a, b);
    expect(changedLineNumbers(al.aChanged)).toEqual([2, 3]);
    expect(changedLineNumbers(al.bChanged)).toEqual([2]);
    // `A = buf(1024)` pairs with `A = buf(M)`, not with the dropped `M = T.int32()`.
    expect(al.aToB).toEqual([0, -1, 1, 2]);
    expect(al.bToA).toEqual([0, 2, 3]);
  });

  it('aligns identical texts and empty texts', () => {
    const al = alignLines(['x', 'y'], ['x', 'y']);
    expect(al.aChanged).toEqual([false, false]);
    const empty = alignLines([], ['z']);
    expect(empty.bChanged).toEqual([true]);
    expect(empty.bToA).toEqual([-1]);
  });

  it('finds moved common lines in the middle', () => {
    const a = ['s', 'p', 'q', 'r', 'e'];
    const b = ['s', 'q', 'x', 'r', 'e'];
    const al = alignLines(a, b);
    expect(changedLineNumbers(al.aChanged)).toEqual([2]);
    expect(changedLineNumbers(al.bChanged)).toEqual([3]);
  });
});

describe('lineSimilarity', () => {
  it('compares words, not spaces', () => {
    expect(lineSimilarity('a = b', 'a=b')).toBe(1);
    expect(lineSimilarity('a = f(M)', 'a = f(1024)')).toBeCloseTo(10 / 12);
    expect(lineSimilarity('x', 'y')).toBe(0);
    expect(lineSimilarity('', '')).toBe(1);
  });
});

describe('mapLinePosition', () => {
  it('keeps the distance from the nearest partnered line', () => {
    const partner = [0, -1, 1, 2];
    expect(mapLinePosition(partner, 3, 0)).toBe(0);
    expect(mapLinePosition(partner, 3, 1.5)).toBe(1.5);
    expect(mapLinePosition(partner, 3, 2.25)).toBe(1.25);
    expect(mapLinePosition(partner, 3, 99)).toBe(2);
    expect(mapLinePosition([], 3, 1)).toBe(0);
    expect(mapLinePosition([-1, -1], 5, 1)).toBe(1);
  });
});

describe('changedRanges', () => {
  it('finds the substituted words', () => {
    const line = 'A = T.match_buffer(A_handle, (1024, 1024), "float16")';
    const old = 'A = T.match_buffer(A_handle, (M, K), "float16")';
    const slices = (text: string, ranges: Array<[number, number]>) => ranges.map(([s, e]) => text.slice(s, e));
    expect(slices(line, changedRanges(old, line))).toEqual(['1024, 1024']);
    expect(slices(old, changedRanges(line, old))).toEqual(['M, K']);
  });

  it('marks a replaced expression as one range, not its accidental common words', () => {
    const old = 'for k in T.serial((K + 31) // 32, annotations={"num_stages": 3}):';
    const line = 'for k in T.serial(32, annotations={"num_stages": 3}):';
    const slices = (text: string, ranges: Array<[number, number]>) => ranges.map(([s, e]) => text.slice(s, e));
    expect(slices(line, changedRanges(old, line))).toEqual(['32']);
    expect(slices(old, changedRanges(line, old))).toEqual(['(K + 31) // 32']);
  });

  it('marks an insertion on the new side only', () => {
    const slices = (text: string, ranges: Array<[number, number]>) => ranges.map(([s, e]) => text.slice(s, e));
    expect(slices('f(a, b)', changedRanges('f(a)', 'f(a, b)'))).toEqual([', b']);
    expect(changedRanges('f(a, b)', 'f(a)')).toEqual([]);
  });

  it('keeps separate small changes apart in a mostly equal middle', () => {
    const old = 'f(a, M, b, c, d, e, N)';
    const line = 'f(a, 8, b, c, d, e, 16)';
    expect(changedRanges(old, line).map(([s, e]) => line.slice(s, e))).toEqual(['8', '16']);
  });

  it('is empty for identical lines', () => {
    expect(changedRanges('x = 1', 'x = 1')).toEqual([]);
  });

  it('tokenizes words, spaces and punctuation', () => {
    expect(wordTokens('T.copy(a, b)')).toEqual(['T.copy', '(', 'a', ',', ' ', 'b', ')']);
  });
});
