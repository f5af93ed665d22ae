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
    const ranges = changedRanges(old, line);
    // The comma between the two numbers is common to both lines, so it is not highlighted.
    expect(ranges.map(([s, e]) => line.slice(s, e))).toEqual(['1024', '1024']);
    expect(changedRanges(line, old).map(([s, e]) => old.slice(s, e))).toEqual(['M', 'K']);
  });

  it('is empty for identical lines', () => {
    expect(changedRanges('x = 1', 'x = 1')).toEqual([]);
  });

  it('tokenizes words, spaces and punctuation', () => {
    expect(wordTokens('T.copy(a, b)')).toEqual(['T.copy', '(', 'a', ',', ' ', 'b', ')']);
  });
});
