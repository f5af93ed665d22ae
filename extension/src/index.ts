/**
 * JupyterLab plugin for `%%tilekernel` cells.
 *
 * - Every editor gets the magic-line marker (tilekernel.ts); it only shows in
 *   cells that start with `%%tilekernel`.
 * - Code cells starting with `%%tilekernel` get the editor language
 *   `text/x-tile-nb-tilekernel` (Python), so they are highlighted as Python even
 *   when the notebook's kernel language is not known yet; the cell node gets the
 *   class `tnb-tilekernel-cell` (an accent bar on the left).
 *
 * - Line mapping between a kernel's cell and its views (linemap.ts): hovering a line of a code cell highlights,
 *   in every kernel view of the notebook whose source is that cell, what the line became; clicking pins it.
 *   Hovering a line of a view highlights its source line in the cell (sourcelines.ts).
 *
 * The kernel view renderer is a separate MIME extension (mime.ts).
 */

import { JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import type { ICellModel } from '@jupyterlab/cells';
import {
  EditorExtensionRegistry,
  IEditorExtensionRegistry,
  IEditorLanguageRegistry
} from '@jupyterlab/codemirror';
import { INotebookTracker, NotebookPanel } from '@jupyterlab/notebook';
import type { LanguageSupport } from '@codemirror/language';
import type { EditorView } from '@codemirror/view';

import { findTileMagic, TILEKERNEL_MIME } from './magic';
import { tileKernelMagicLine } from './tilekernel';
import {
  ISourceHighlightDetail,
  ISourceHoverDetail,
  SOURCE_HIGHLIGHT_EVENT,
  SOURCE_HOVER_EVENT,
  sourceMatches
} from './linemap';
import { highlightSourceLines, sourceLines } from './sourcelines';

/** Class on the cell widget of a `%%tilekernel` cell. */
export const TILEKERNEL_CELL_CLASS = 'tnb-tilekernel-cell';

/**
 * Keeps the editor mime type and the cell class of one notebook's `%%tilekernel` cells up to date.
 *
 * The notebook resets every code cell's mime type to its default when the kernel
 * language changes or a cell is inserted, and editors load languages
 * asynchronously (the last one to resolve wins). So this waits for the
 * notebook's default language to be loaded before switching a cell to the
 * tile kernel language, and re-applies after each reset.
 */
class TileKernelCells {
  constructor(
    private readonly panel: NotebookPanel,
    private readonly languages: IEditorLanguageRegistry
  ) {
    const notebook = panel.content;
    notebook.modelChanged.connect(() => this._watchModel(), this);
    this._watchModel();
  }

  private _watchModel(): void {
    const model = this.panel.content.model;
    if (!model || model === this._model) {
      return;
    }
    this._model = model;
    model.cells.changed.connect(() => this._watchCells(), this);
    this._watchCells();
  }

  private _watchCells(): void {
    const model = this.panel.content.model;
    if (!model) {
      return;
    }
    for (let i = 0; i < model.cells.length; i++) {
      const cell = model.cells.get(i);
      if (cell.type !== 'code') {
        continue;
      }
      if (!this._watched.has(cell)) {
        this._watched.add(cell);
        cell.contentChanged.connect(() => void this._update(cell), this);
        cell.mimeTypeChanged.connect(() => void this._update(cell), this);
      }
      // Inserting a cell also resets its mime type, so check every cell.
      void this._update(cell);
    }
  }

  private async _update(cell: ICellModel): Promise<void> {
    const notebook = this.panel.content;
    if (notebook.isDisposed || cell.isDisposed) {
      return;
    }
    const isTile = findTileMagic(cell.sharedModel.getSource()) !== null;
    const widget = notebook.widgets.find(w => w.model === cell);
    widget?.toggleClass(TILEKERNEL_CELL_CLASS, isTile);
    if (isTile && cell.mimeType !== TILEKERNEL_MIME) {
      try {
        await this.languages.getLanguage(notebook.codeMimetype);
      } catch {
        // The default language failing to load does not stop ours.
      }
      if (!cell.isDisposed && findTileMagic(cell.sharedModel.getSource()) !== null) {
        cell.mimeType = TILEKERNEL_MIME;
      }
    } else if (!isTile && cell.mimeType === TILEKERNEL_MIME) {
      cell.mimeType = notebook.codeMimetype;
    }
  }

  private _model: unknown = null;
  private readonly _watched = new WeakSet<ICellModel>();
}

/** The CodeMirror view of a cell's editor (JupyterLab 4's CodeMirrorEditor keeps it as `.editor`). */
function editorView(cell: { editor: unknown } | undefined): EditorView | null {
  const view = (cell?.editor as { editor?: EditorView } | null)?.editor;
  return view && typeof view.dispatch === 'function' ? view : null;
}

/**
 * Links the code cells of one notebook with the kernel views in it (see linemap.ts): pointer over a cell's line
 * -> SOURCE_HIGHLIGHT_EVENT to every view (each checks that its source is that cell); SOURCE_HOVER_EVENT from a
 * view -> the source line highlighted in the cells whose text the view's source is.
 */
class LineLinks {
  constructor(private readonly panel: NotebookPanel) {
    const node = panel.content.node;
    node.addEventListener(SOURCE_HOVER_EVENT, event => this._fromView(event as CustomEvent<ISourceHoverDetail>));
    node.addEventListener('mousemove', event => this._overEditor(event, false));
    node.addEventListener('click', event => this._overEditor(event, true));
    node.addEventListener('mouseleave', () => this._send(null, [], false));
  }

  private _codeCell(target: EventTarget | null) {
    if (!(target instanceof Element) || !target.closest('.jp-InputArea-editor')) {
      return undefined;
    }
    return this.panel.content.widgets.find(w => w.model.type === 'code' && w.node.contains(target));
  }

  private _overEditor(event: MouseEvent, pin: boolean): void {
    const cell = this._codeCell(event.target);
    if (!cell) {
      if (!pin && this._line !== null) {
        this._send(null, [], false);
      }
      return;
    }
    const position = cell.editor?.getPositionForCoordinate({
      left: event.clientX,
      top: event.clientY,
      right: event.clientX,
      bottom: event.clientY,
      x: event.clientX,
      y: event.clientY,
      width: 0,
      height: 0
    } as any);
    const line = position ? position.line + 1 : null;
    if (pin || line !== this._line) {
      this._send(line, cell.model.sharedModel.getSource().split('\n'), pin);
    }
  }

  private _send(line: number | null, cellLines: string[], pin: boolean): void {
    this._line = line;
    const detail: ISourceHighlightDetail = { lines: line === null ? null : [line], cellLines, pin };
    this.panel.content.node.querySelectorAll('.tnb-kernel-view').forEach(view => {
      view.dispatchEvent(new CustomEvent(SOURCE_HIGHLIGHT_EVENT, { detail }));
    });
  }

  private _fromView(event: CustomEvent<ISourceHoverDetail>): void {
    const { lines, source } = event.detail ?? { lines: null, source: null };
    for (const cell of this.panel.content.widgets) {
      if (cell.model.type !== 'code') {
        continue;
      }
      const view = editorView(cell);
      if (!view) {
        continue;
      }
      const matches = lines !== null && sourceMatches(source, cell.model.sharedModel.getSource().split('\n'));
      highlightSourceLines(view, matches ? lines! : []);
    }
  }

  private _line: number | null = null;
}

const tileKernelCells: JupyterFrontEndPlugin<void> = {
  id: 'tile-nb-labextension:tilekernel-cells',
  description: 'Python highlighting and a magic-line marker for %%tilekernel cells.',
  autoStart: true,
  requires: [INotebookTracker, IEditorLanguageRegistry, IEditorExtensionRegistry],
  activate: (
    app: JupyterFrontEnd,
    tracker: INotebookTracker,
    languages: IEditorLanguageRegistry,
    extensions: IEditorExtensionRegistry
  ) => {
    extensions.addExtension({
      name: 'tile-nb:tilekernel-magic-line',
      factory: () => EditorExtensionRegistry.createImmutableExtension(tileKernelMagicLine())
    });
    extensions.addExtension({
      name: 'tile-nb:source-lines',
      factory: () => EditorExtensionRegistry.createImmutableExtension(sourceLines())
    });
    languages.addLanguage({
      name: 'tilekernel',
      displayName: 'tile_nb kernel (Python)',
      mime: TILEKERNEL_MIME,
      load: async (): Promise<LanguageSupport> => {
        const python = await languages.getLanguage('text/x-python');
        if (!python?.support) {
          throw new Error('tile-nb-labextension: the Python editor language is not available');
        }
        return python.support;
      }
    });
    tracker.widgetAdded.connect((_, panel) => {
      new TileKernelCells(panel, languages);
      new LineLinks(panel);
    });
  }
};

export default [tileKernelCells];
