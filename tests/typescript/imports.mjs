// Every import of TypeScript files, read by the TypeScript compiler's own parser (sdk/typescript/node_modules):
// `import ... from`, `export ... from`, `import x = require()` (kind "static"), `import type` and `export type`
// (kind "type": erased from the JavaScript), `import("...")` calls (kind "dynamic": the modules loaded on demand) and
// `import("...")` types. node imports.mjs FILE... -> prints {file: [{module, kind, line}]} as JSON; `module` is null
// where the specifier is not a string literal (an import nobody can check).
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";

const require = createRequire(new URL("../../sdk/typescript/package.json", import.meta.url));
const ts = require("typescript");

const out = {};
for (const file of process.argv.slice(2)) {
  const source = ts.createSourceFile(file, readFileSync(file, "utf8"), ts.ScriptTarget.Latest, true);
  const found = [];
  const visit = (node) => {
    let specifier, kind;
    if ((ts.isImportDeclaration(node) || ts.isExportDeclaration(node)) && node.moduleSpecifier !== undefined) {
      const typeOnly = ts.isImportDeclaration(node) ? node.importClause?.isTypeOnly : node.isTypeOnly;
      [specifier, kind] = [node.moduleSpecifier, typeOnly ? "type" : "static"];
    } else if (ts.isImportEqualsDeclaration(node) && ts.isExternalModuleReference(node.moduleReference)) {
      [specifier, kind] = [node.moduleReference.expression, "static"];
    } else if (ts.isCallExpression(node) && node.expression.kind === ts.SyntaxKind.ImportKeyword) {
      [specifier, kind] = [node.arguments[0], "dynamic"];
    } else if (ts.isImportTypeNode(node)) {
      [specifier, kind] = [ts.isLiteralTypeNode(node.argument) ? node.argument.literal : node.argument, "type"];
    }
    if (kind !== undefined) {
      const line = source.getLineAndCharacterOfPosition(node.getStart(source)).line + 1;
      found.push({ module: specifier !== undefined && ts.isStringLiteralLike(specifier) ? specifier.text : null, kind, line });
    }
    ts.forEachChild(node, visit);
  };
  visit(source);
  out[file] = found;
}
console.log(JSON.stringify(out));
