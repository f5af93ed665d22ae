// jsdom has no DragEvent, which @lumino/dragdrop (imported by @lumino/widgets) subclasses at load time.
if (typeof globalThis.DragEvent === 'undefined') {
  globalThis.DragEvent = class DragEvent extends MouseEvent {};
}
