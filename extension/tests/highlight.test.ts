import { splitByRanges, tokenizeLine } from '../src/highlight';

const kinds = (line: string, language: string) =>
  tokenizeLine(line, language)
    .filter(t => t.kind)
    .map(t => [t.text, t.kind]);

describe('tokenizeLine', () => {
  it('colors python keywords, T.* calls, numbers, strings and comments', () => {
    expect(kinds('for k in T.serial(32):  # loop', 'python')).toEqual([
      ['for', 'keyword'],
      ['in', 'keyword'],
      ['T.serial', 'builtin'],
      ['32', 'number'],
      ['# loop', 'comment']
    ]);
    expect(kinds('x = "a # b"', 'python')).toEqual([['"a # b"', 'string']]);
    expect(kinds('@T.prim_func', 'python')).toEqual([['@T.prim_func', 'decorator']]);
    expect(kinds('x1 = y2', 'python')).toEqual([]);
  });

  it('colors CUDA and PTX', () => {
    expect(kinds('extern "C" __global__ void f(float* x) {', 'cuda')).toEqual([
      ['extern', 'keyword'],
      ['"C"', 'string'],
      ['__global__', 'keyword'],
      ['void', 'type'],
      ['float', 'type']
    ]);
    expect(kinds('#include <cuda_fp16.h>', 'cuda')).toEqual([['#include <cuda_fp16.h>', 'meta']]);
    expect(kinds('\tld.param.u64 \t%rd1, [p]; // x', 'ptx')).toEqual([
      ['.param', 'keyword'],
      ['.u64', 'keyword'],
      ['%rd1', 'variable'],
      ['// x', 'comment']
    ]);
  });

  it('keeps the text intact', () => {
    const line = '    T.tile.copy(A_shared, A[bx * 128:bx * 128 + 128, k * 32])  # 1';
    for (const language of ['python', 'cuda', 'ptx', 'text', 'unknown']) {
      expect(
        tokenizeLine(line, language)
          .map(t => t.text)
          .join('')
      ).toBe(line);
    }
    expect(tokenizeLine('', 'python')).toEqual([]);
  });
});

describe('splitByRanges', () => {
  it('cuts tokens at range boundaries', () => {
    const tokens = tokenizeLine('x = (1024, 1024)', 'python');
    const pieces = splitByRanges(tokens, [[5, 15]]);
    expect(pieces.map(p => p.text).join('')).toBe('x = (1024, 1024)');
    expect(
      pieces
        .filter(p => p.changed)
        .map(p => p.text)
        .join('')
    ).toBe('1024, 1024');
  });
});
