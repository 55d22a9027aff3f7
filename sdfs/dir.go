package sdfs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
)

// PutFile stores a local file as name; a replica failing midway is retried elsewhere.
func (c *Client) PutFile(ctx context.Context, local, name string) (Version, int64, error) {
	f, err := os.Open(local)
	if err != nil {
		return Version{}, 0, fmt.Errorf("sdfs: put: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() {
		return Version{}, 0, fmt.Errorf("sdfs: put: %s is not a regular file", local)
	}
	var r io.Reader = f
	if c.progress != nil {
		r = progressReader{f, c.progress}
	}
	v, err := c.Put(ctx, name, r)
	return v, st.Size(), err
}

type progressReader struct {
	r io.Reader
	f func(int64)
}

func (p progressReader) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	p.f(int64(n))
	return n, err
}

// GetFile writes the newest version of name to local, atomically: a failed get leaves
// no partial file.
func (c *Client) GetFile(ctx context.Context, name, local string) (VersionInfo, error) {
	dir := filepath.Dir(local)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return VersionInfo{}, fmt.Errorf("sdfs: get: %w", err)
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(local)+".sdfs-*")
	if err != nil {
		return VersionInfo{}, fmt.Errorf("sdfs: get: %w", err)
	}
	defer os.Remove(tmp.Name())
	info, err := c.Get(ctx, name, tmp)
	if cerr := tmp.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("sdfs: get: %w", cerr)
	}
	if err != nil {
		return info, err
	}
	if err := os.Rename(tmp.Name(), local); err != nil {
		return info, fmt.Errorf("sdfs: get: %w", err)
	}
	return info, nil
}

// DirResult counts what PutDir or GetDir moved.
type DirResult struct {
	Files int
	Bytes int64
}

// dirParallel is how many files PutDir and GetDir move at once.
const dirParallel = 4

// PutDir stores every regular file under localDir as prefix/<relative path>.
func (c *Client) PutDir(ctx context.Context, localDir, prefix string) (DirResult, error) {
	prefix = strings.TrimSuffix(prefix, "/")
	if err := ValidateName(prefix); err != nil {
		return DirResult{}, err
	}
	var jobs [][2]string
	err := filepath.WalkDir(localDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		rel, err := filepath.Rel(localDir, p)
		if err != nil {
			return err
		}
		name := prefix + "/" + filepath.ToSlash(rel)
		if err := ValidateName(name); err != nil {
			return err
		}
		jobs = append(jobs, [2]string{p, name})
		return nil
	})
	if err != nil {
		return DirResult{}, fmt.Errorf("sdfs: putdir: %w", err)
	}
	return c.parallel(ctx, jobs, func(ctx context.Context, j [2]string) (int64, error) {
		_, n, err := c.PutFile(ctx, j[0], j[1])
		return n, err
	})
}

// GetDir fetches every visible name under prefix/ into localDir/<rest of the name>.
func (c *Client) GetDir(ctx context.Context, prefix, localDir string) (DirResult, error) {
	prefix = strings.TrimSuffix(prefix, "/")
	if err := ValidateName(prefix); err != nil {
		return DirResult{}, err
	}
	files, err := c.List(ctx, prefix+"/")
	if err != nil {
		return DirResult{}, err
	}
	if len(files) == 0 {
		return DirResult{}, fmt.Errorf("%w: nothing under %s/", ErrNotFound, prefix)
	}
	var jobs [][2]string
	for _, f := range files {
		rel := strings.TrimPrefix(f.Name, prefix+"/")
		if ValidateName(rel) != nil || path.Clean(rel) != rel {
			return DirResult{}, fmt.Errorf("sdfs: getdir: unsafe name %q", f.Name)
		}
		jobs = append(jobs, [2]string{f.Name, filepath.Join(localDir, filepath.FromSlash(rel))})
	}
	return c.parallel(ctx, jobs, func(ctx context.Context, j [2]string) (int64, error) {
		info, err := c.GetFile(ctx, j[0], j[1])
		return info.Size, err
	})
}

func (c *Client) parallel(ctx context.Context, jobs [][2]string, f func(context.Context, [2]string) (int64, error)) (DirResult, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var mu sync.Mutex
	var res DirResult
	var errs []error
	work := make(chan [2]string)
	var wg sync.WaitGroup
	for i := 0; i < dirParallel; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range work {
				n, err := f(ctx, j)
				mu.Lock()
				if err != nil {
					errs = append(errs, fmt.Errorf("%s: %w", j[0], err))
					cancel()
				} else {
					res.Files++
					res.Bytes += n
				}
				mu.Unlock()
			}
		}()
	}
	for _, j := range jobs {
		if ctx.Err() != nil {
			break
		}
		work <- j
	}
	close(work)
	wg.Wait()
	return res, errors.Join(errs...)
}
