module idunno

go 1.26.8
