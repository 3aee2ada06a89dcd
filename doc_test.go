package rocsync

import (
	"go/ast"
	"go/doc"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// go doc shows every exported identifier with its documentation, and every
// exported field of every exported struct with a comment of its own.
func TestExportedAPIIsDocumented(t *testing.T) {
	fset := token.NewFileSet()
	names, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var files []*ast.File
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	p, err := doc.NewFromFiles(fset, files, "github.com/rocsync/rocsync")
	if err != nil {
		t.Fatal(err)
	}
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
