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

import { findTileMagic, TILEKERNEL_MIME } from './magic';
import { tileKernelMagicLine } from './tilekernel';

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
    });
  }
};

export default [tileKernelCells];
