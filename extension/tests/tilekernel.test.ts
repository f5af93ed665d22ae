import { EditorState } from '@codemirror/state';
import { EditorView } from '@codemirror/view';

import { tileKernelMagicLine } from '../src/tilekernel';

function editor(doc: string): EditorView {
  const parent = document.createElement('div');
  document.body.appendChild(parent);
  return new EditorView({ state: EditorState.create({ doc, extensions: [tileKernelMagicLine()] }), parent });
}

describe('tileKernelMagicLine', () => {
  it('marks the magic line, its name and options, and adds the badge', () => {
    const view = editor('%%tilekernel --shapes M=1024\n@tile_nb.jit\ndef f(): pass');
    const line = view.dom.querySelector('.cm-line.tnb-tilekernel-line')!;
    expect(line.textContent).toBe('%%tilekernel --shapes M=1024tile kernel');
    expect(view.dom.querySelector('.tnb-tilekernel-magic')!.textContent).toBe('%%tilekernel');
    expect(view.dom.querySelector('.tnb-tilekernel-options')!.textContent).toBe(' --shapes M=1024');
    expect(view.dom.querySelectorAll('.tnb-tilekernel-badge')).toHaveLength(1);
    // The badge is a widget: it is not part of the document.
    expect(view.state.doc.line(1).text).toBe('%%tilekernel --shapes M=1024');
    view.destroy();
  });

  it('follows edits: removing the magic removes the marker, typing it adds it back', () => {
    const view = editor('x = 1');
    expect(view.dom.querySelector('.tnb-tilekernel-badge')).toBeNull();
    view.dispatch({ changes: { from: 0, insert: '%%tilekernel\n' } });
    expect(view.dom.querySelector('.tnb-tilekernel-badge')).not.toBeNull();
    expect(view.dom.querySelector('.tnb-tilekernel-options')).toBeNull();
    view.dispatch({ changes: { from: 0, to: 13 } });
    expect(view.dom.querySelector('.tnb-tilekernel-line')).toBeNull();
    view.destroy();
  });
});
