/** Jest: unit tests of the pure parts (payload parsing, diff, highlighting, DOM view) in jsdom. */
module.exports = {
  testEnvironment: 'jsdom',
  roots: ['<rootDir>/tests'],
  testMatch: ['**/*.test.ts'],
  setupFiles: ['<rootDir>/tests/setup.js'],
  transform: {
    '^.+\\.tsx?$': ['ts-jest', { tsconfig: 'tsconfig.test.json' }],
    // JupyterLab's sanitizer ships as an ES module: compile it for the sanitizer test (tests/sanitize.test.ts).
    '^.+/apputils/lib/sanitizer\\.js$': ['ts-jest', { tsconfig: 'tsconfig.test.json' }]
  },
  transformIgnorePatterns: ['/node_modules/(?!@jupyterlab/apputils/lib/sanitizer\\.js$)']
};
