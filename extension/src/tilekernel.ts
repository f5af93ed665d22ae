/**
 * CodeMirror 6 extension marking the `%%tilekernel` line of a cell.
 *
 * Added to every editor through JupyterLab's editor extension registry, so the
 * marker does not depend on which language the editor has loaded: the magic
 * line gets a tinted background, the magic name and its options their own
 * colors, and a "tile kernel" badge at the end of the line.
 */

import { Extension, Range } from '@codemirror/state';
import { Decoration, DecorationSet, EditorView, ViewPlugin, ViewUpdate, WidgetType } from '@codemirror/view';

import { findTileMagic, TILEKERNEL_MAGIC } from './magic';

class TileKernelBadge extends WidgetType {
  toDOM(): HTMLElement {
    const badge = document.createElement('span');
    badge.className = 'tnb-tilekernel-badge';
    badge.textContent = 'tile kernel';
    badge.title = 'This cell is compiled by tile_nb (%%tilekernel)';
    badge.setAttribute('aria-hidden', 'true');
    return badge;
  }

  eq(other: WidgetType): boolean {
    return other instanceof TileKernelBadge;
  }
}

const lineDecoration = Decoration.line({ class: 'tnb-tilekernel-line' });
const magicDecoration = Decoration.mark({ class: 'tnb-tilekernel-magic' });
const optionsDecoration = Decoration.mark({ class: 'tnb-tilekernel-options' });
const badgeDecoration = Decoration.widget({ widget: new TileKernelBadge(), side: 1 });

/** The decorations for a document: none unless it is a `%%tilekernel` cell. */
function decorationsFor(view: EditorView): DecorationSet {
  // The magic is within the first lines; do not stringify a long document.
  const head = view.state.doc.sliceString(0, Math.min(view.state.doc.length, 4096));
  const magic = findTileMagic(head);
  if (!magic) {
    return Decoration.none;
  }
  const magicEnd = magic.from + TILEKERNEL_MAGIC.length;
  const ranges: Range<Decoration>[] = [
    lineDecoration.range(magic.from),
    magicDecoration.range(magic.from, magicEnd)
  ];
  if (magic.to > magicEnd) {
    ranges.push(optionsDecoration.range(magicEnd, magic.to));
  }
  ranges.push(badgeDecoration.range(magic.to));
  return Decoration.set(ranges, true);
}

/** The extension: recomputes the marker when the document changes. */
export function tileKernelMagicLine(): Extension {
  return ViewPlugin.fromClass(
    class {
      decorations: DecorationSet;

      constructor(view: EditorView) {
        this.decorations = decorationsFor(view);
      }

      update(update: ViewUpdate): void {
        if (update.docChanged) {
          this.decorations = decorationsFor(update.view);
        }
      }
    },
    { decorations: plugin => plugin.decorations }
  );
}
