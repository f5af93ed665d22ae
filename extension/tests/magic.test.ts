import { findTileMagic } from '../src/magic';

describe('findTileMagic', () => {
  it('finds the magic line and its options', () => {
    expect(findTileMagic('%%tilekernel --shapes M=1024\n@tile_nb.jit\ndef f(): pass')).toEqual({
      line: 0,
      from: 0,
      to: 28,
      options: '--shapes M=1024'
    });
    expect(findTileMagic('%%tilekernel')).toMatchObject({ line: 0, options: '' });
  });

  it('allows blank lines before the magic, like IPython', () => {
    expect(findTileMagic('\n  \n%%tilekernel --cpu\nx')).toMatchObject({ line: 2, from: 4, options: '--cpu' });
    expect(findTileMagic('%%tilekernel\r\nx')).toMatchObject({ to: 12 });
  });

  it.each(['', '\n\n', 'x = 1\n%%tilekernel', ' %%tilekernel', '%%tilekernels', '# %%tilekernel', '%%time'])(
    'rejects %p',
    source => {
      expect(findTileMagic(source)).toBeNull();
    }
  );
});
