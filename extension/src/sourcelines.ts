/**
 * CodeMirror 6 extension highlighting lines of a kernel's cell: the source lines of the IR line hovered in a
 * kernel view (the notebook plugin dispatches `setSourceLines` to the cell's editor view).
 */

import { Extension, Range, StateEffect, StateField } from '@codemirror/state';
import { Decoration, DecorationSet, EditorView } from '@codemirror/view';

/** Highlight these 1-based lines of the document (an empty list clears). */
export const setSourceLines = StateEffect.define<number[]>();

const lineDecoration = Decoration.line({ class: 'tnb-source-line' });

const sourceLinesField = StateField.define<DecorationSet>({
  create: () => Decoration.none,
  update(decorations, transaction) {
    let next = decorations.map(transaction.changes);
    for (const effect of transaction.effects) {
      if (effect.is(setSourceLines)) {
        const doc = transaction.state.doc;
        const ranges: Range<Decoration>[] = [];
        for (const n of Array.from(new Set(effect.value)).sort((a, b) => a - b)) {
          if (n >= 1 && n <= doc.lines) {
            ranges.push(lineDecoration.range(doc.line(n).from));
          }
        }
        next = Decoration.set(ranges);
      }
    }
    return next;
  },
  provide: field => EditorView.decorations.from(field)
});

/** The extension (added to every editor; it shows nothing until lines are set). */
export function sourceLines(): Extension {
  return sourceLinesField;
}

/** Set the highlighted lines of an editor view that has the extension (others are left alone). */
export function highlightSourceLines(view: EditorView, lines: number[]): void {
  if (view.state.field(sourceLinesField, false) === undefined) {
    return;
  }
  view.dispatch({ effects: setSourceLines.of(lines) });
}
