package rocsync

import (
	"go/ast"
	"go/doc"
	"go/parser"
	"go/token"
	"os"
	"strings"
	"testing"
)

// go doc shows every exported identifier with its documentation, and every
// exported field of every exported struct with a comment of its own.
func TestExportedAPIIsDocumented(t *testing.T) {
	fset := token.NewFileSet()
	notTests := func(fi os.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }
	pkgs, err := parser.ParseDir(fset, ".", notTests, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	p := doc.New(pkgs["rocsync"], "github.com/rocsync/rocsync", 0)
	if p.Doc == "" {
		t.Error("no package doc")
	}
	missing := func(what string) { t.Errorf("undocumented: %s", what) }
	checkFuncs := func(fs []*doc.Func, recv string) {
		for _, f := range fs {
			if f.Doc == "" {
				missing(recv + f.Name)
			}
		}
	}
	checkValues := func(vs []*doc.Value) {
		for _, v := range vs {
			if v.Doc != "" {
				continue
			}
			for _, spec := range v.Decl.Specs {
				vs := spec.(*ast.ValueSpec)
				if vs.Doc == nil && vs.Comment == nil {
					missing(vs.Names[0].Name)
				}
			}
		}
	}
	checkFuncs(p.Funcs, "")
	checkValues(p.Consts)
	checkValues(p.Vars)
	for _, ty := range p.Types {
		if ty.Doc == "" {
			missing("type " + ty.Name)
		}
		checkFuncs(ty.Funcs, "")
		checkFuncs(ty.Methods, ty.Name+".")
		checkValues(ty.Consts)
		checkValues(ty.Vars)
		for _, spec := range ty.Decl.Specs {
			ts := spec.(*ast.TypeSpec)
			st, ok := ts.Type.(*ast.StructType)
			if !ok {
				continue
			}
			for _, f := range st.Fields.List {
				for _, n := range f.Names {
					if n.IsExported() && f.Doc == nil && f.Comment == nil {
						missing(ty.Name + "." + n.Name)
					}
				}
			}
		}
	}
}
