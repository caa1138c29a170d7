#!/usr/bin/env python3
"""Tests of scripts/import-circles on small crates written to a temp dir.

Run: python3 scripts/import_circles_test.py [-v]   (quiet unless a test fails)
"""

import contextlib
import io
import os
import sys
import tempfile
import unittest
from importlib.machinery import SourceFileLoader
from importlib.util import module_from_spec, spec_from_loader

HERE = os.path.dirname(os.path.abspath(__file__))
_loader = SourceFileLoader("import_circles", os.path.join(HERE, "import-circles"))
ic = module_from_spec(spec_from_loader("import_circles", _loader))
_loader.exec_module(ic)


class ImportCircles(unittest.TestCase):
    def crate(self, files):
        """Writes {relative path: source} under a fresh src dir; returns it."""
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        root = os.path.join(tmp.name, "src")
        for rel, text in files.items():
            path = os.path.join(root, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
        return root

    def circles(self, files):
        return ic.find_circles(self.crate(files))[0]

    def test_two_files_that_use_each_other(self):
        root = self.crate({
            "lib.rs": "pub mod a;\npub mod b;\n",
            "a.rs": "use crate::b::X;\npub struct Y;\n",
            "b.rs": "pub struct X;\nfn f() {\n    let _ = crate::a::Y;\n}\n",
        })
        found, edges = ic.find_circles(root)
        self.assertEqual(found, [["a", "b"]])
        self.assertEqual(edges[("a", "b")], (os.path.join(root, "a.rs"), 1))
        self.assertEqual(edges[("b", "a")], (os.path.join(root, "b.rs"), 3))

    def test_reexport_resolves_to_the_defining_child(self):
        # q reaches r's Thing through p's re-export: an edge q -> r, not q -> p.
        files = {
            "lib.rs": "pub mod p;\n",
            "p.rs": "pub mod q;\npub mod r;\npub use r::Thing;\n",
            "p/q.rs": "use super::Thing;\npub struct Q;\n",
            "p/r.rs": "pub struct Thing;\nfn f() { let _ = super::q::Q; }\n",
        }
        self.assertEqual(self.circles(files), [["p::q", "p::r"]])
        # Without r's use of q there is no circle: p -> r and q -> r only.
        files["p/r.rs"] = "pub struct Thing;\n"
        self.assertEqual(self.circles(files), [])

    def test_naming_an_ancestors_item_is_no_edge(self):
        # A child using its parent's items is scoping: no circle with it.
        self.assertEqual(self.circles({
            "lib.rs": "pub mod p;\n",
            "p.rs": "pub mod q;\npub fn helper() {}\nfn g() { let _ = q::Q; }\n",
            "p/q.rs": "pub struct Q;\nfn f() { super::helper(); }\n",
        }), [])
        # A sibling reached through the parent's re-export still counts.
        self.assertEqual(self.circles({
            "lib.rs": "pub mod p;\n",
            "p.rs": "pub mod q;\npub mod r;\npub use r::R;\n",
            "p/q.rs": "pub struct Q;\nfn f() { let _ = super::R; }\n",
            "p/r.rs": "pub struct R;\nfn f() { let _ = super::q::Q; }\n",
        }), [["p::q", "p::r"]])
        # Naming the parent module itself, or `mod q;`, is no edge.
        self.assertEqual(self.circles({
            "lib.rs": "pub mod p;\n",
            "p.rs": "pub mod q;\nfn g() { let _ = q::Q; }\n",
            "p/q.rs": "use crate::p;\npub struct Q;\n",
        }), [])

    def test_grouped_use_tree(self):
        self.assertEqual(self.circles({
            "lib.rs": "pub mod g;\npub mod h;\n",
            "g.rs": "use crate::{h::{self, inner::I}};\npub struct G;\n"
                    "fn f() { let _ = h::H1; }\n",
            "h.rs": "pub mod inner;\npub struct H1;\n",
            "h/inner.rs": "use super::super::g::G as Renamed;\npub struct I;\n",
        }), [["g", "h::inner"]])

    def test_comments_strings_and_test_code_are_ignored(self):
        self.assertEqual(self.circles({
            "lib.rs": "pub mod a;\npub mod c;\n",
            "a.rs": "// uses crate::c::Z\n/* and /* nested */ crate::c::Z */\n"
                    "/// doc: [`Z`](crate::c::Z)\n"
                    "pub struct A;\nfn f() { let s = \"crate::c::Z\"; let r = r#\"crate::c::Z\"#; }\n"
                    "#[cfg(test)]\nmod tests {\n    use crate::c::Z;\n}\n"
                    "#[cfg(test)]\nmod more;\n",
            "a/more.rs": "use crate::c::Z;\n",
            "a_tests.rs": "use crate::c::Z;\n",
            "c.rs": "use crate::a::A;\npub struct Z;\n",
        }), [])

    def test_baseline(self):
        root = self.crate({
            "lib.rs": "pub mod a;\npub mod b;\npub mod c;\n",
            "a.rs": "use crate::b::X;\npub struct Y;\n",
            "b.rs": "use crate::a::Y;\npub struct X;\n",
            "c.rs": "pub struct Z;\n",
        })
        allowed = os.path.join(os.path.dirname(root), "allowed")

        def run(*args, baseline=None):
            if baseline is not None:
                with open(allowed, "w", encoding="utf-8") as f:
                    f.write(baseline)
            with contextlib.redirect_stdout(io.StringIO()), \
                    contextlib.redirect_stderr(io.StringIO()) as err:
                code = ic.main(["--root", root, "--allowed", allowed] + list(args))
            return code, err.getvalue()

        code, err = run(baseline="# none yet\n")
        self.assertEqual(code, 1)
        self.assertIn("a new import circle", err)
        self.assertIn("a -> b", err)
        self.assertEqual(run(baseline="# allowed\na b\n")[0], 0)
        # An allowed circle that is bigger than the one found is stale.
        code, err = run(baseline="a b c\n")
        self.assertEqual(code, 1)
        self.assertIn("gone or smaller", err)
        # A circle that grew past the allowed one fails.
        with open(os.path.join(root, "c.rs"), "w", encoding="utf-8") as f:
            f.write("use crate::a::Y;\npub struct Z;\n")
        with open(os.path.join(root, "a.rs"), "a", encoding="utf-8") as f:
            f.write("fn f() { let _ = crate::c::Z; }\n")
        code, err = run(baseline="a b\n")
        self.assertEqual(code, 1)
        self.assertIn("a grown import circle", err)
        self.assertEqual(run("--list")[0], 0)
        self.assertEqual(run("--update")[0], 0)
        with open(allowed, encoding="utf-8") as f:
            self.assertIn("\na b c\n", f.read())
        self.assertEqual(run()[0], 0)


if __name__ == "__main__":
    verbose = "-v" in sys.argv[1:]
    out = sys.stderr if verbose else io.StringIO()
    suite = unittest.defaultTestLoader.loadTestsFromTestCase(ImportCircles)
    result = unittest.TextTestRunner(stream=out, verbosity=2 if verbose else 1).run(suite)
    if not result.wasSuccessful():
        if not verbose:
            sys.stderr.write(out.getvalue())
        sys.exit(1)
